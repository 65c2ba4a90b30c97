"""The Adult records shipped in data/ (data/README.md) and the default config that reads them."""

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from querysmasher.data import load_records
from querysmasher.pipeline.datasets import resolve_data_source
from querysmasher.schema import parse_schema

REPO = Path(__file__).resolve().parents[1]


def _config_data_paths(cfg: dict):
    for name, entry in (cfg.get("schemas") or {}).items():
        for key in ("csv", "domain"):
            if (entry.get("data") or {}).get(key):
                yield name, entry["data"][key]


@pytest.mark.parametrize("config", sorted(p.name for p in (REPO / "config").glob("*.yaml") if p.name != "schema.yaml"))
def test_configs_read_data_from_inside_the_repository(config):
    cfg = yaml.safe_load((REPO / "config" / config).read_text())
    for name, path in _config_data_paths(cfg):
        assert not Path(path).is_absolute() and ".." not in Path(path).parts, (config, name, path)


def test_default_config_reads_the_shipped_adult_records(adult_data, monkeypatch):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    monkeypatch.chdir(REPO)  # the workflow runs from the repository root
    src = resolve_data_source(cfg["schemas"]["adult"]["data"])
    assert src["kind"] == "csv" and Path(src["path"]).resolve() == (adult_data / "adult.csv").resolve()
    records = load_records(src["path"], parse_schema("adult"))
    assert records.codes.shape == (48_842, 14)


def test_shipped_files_match_the_checksums_in_their_readme(adult_data):
    readme = (adult_data / "README.md").read_text()
    sums = dict((name, digest) for digest, name in re.findall(r"([0-9a-f]{64})  (\S+)", readme))
    assert set(sums) == {"adult.csv", "adult-domain.json"}
    for name, digest in sums.items():
        assert hashlib.sha256((adult_data / name).read_bytes()).hexdigest() == digest
    assert "CC BY 4.0" in readme and "Apache" in readme and "Kohavi" in readme


def test_without_the_file_the_default_config_falls_back_to_synthetic(tmp_path, monkeypatch):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    monkeypatch.chdir(tmp_path)  # a folder without data/
    assert resolve_data_source(cfg["schemas"]["adult"]["data"])["kind"] == "synthetic"
