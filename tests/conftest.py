import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def adult_data() -> Path:
    """The Adult CSV beside the project; skip only when ../shared/data is absent."""
    if not (SHARED_DATA / "adult.csv").is_file():
        pytest.skip(f"{SHARED_DATA} is absent")
    return SHARED_DATA
