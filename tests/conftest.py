import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REPO_DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def adult_data() -> Path:
    """The Adult CSV shipped in the repository's data/ (data/README.md); skip only when absent."""
    if not (REPO_DATA / "adult.csv").is_file():
        pytest.skip(f"{REPO_DATA / 'adult.csv'} is absent")
    return REPO_DATA
