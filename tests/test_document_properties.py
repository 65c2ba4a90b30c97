"""Property-based fuzzing (Hypothesis) of the one strict document reader, the workflow's config
layering and the release spec parser (issue 40): every input parses to what YAML 1.2 says it is, or
is one InputError naming the field; never another exception, never a YAML 1.1 reading."""

import string

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from querysmasher.documents import parse_json, parse_yaml
from querysmasher.errors import InputError
from querysmasher.pipeline.config import merge_config, read_workflow_config
from querysmasher.release import parse_release_spec

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_YAML_CHARS = st.sampled_from(list(string.ascii_letters + string.digits + " :-_.,[]{}&*!|>'\"#%@`~?\n\t<=+\\"))


@pytest.mark.parametrize(
    "parse, alphabet", [(parse_yaml, _YAML_CHARS), (parse_json, st.characters())], ids=["yaml", "json"]
)
def test_any_text_is_a_document_or_one_input_error(parse, alphabet):
    @FUZZ
    @given(st.text(alphabet, max_size=200))
    def check(text):
        try:
            parse(text, "spec")
        except InputError as exc:
            assert "\n" not in str(exc)

    check()


@FUZZ
@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=3))
def test_integers_are_read_as_yaml_1_2_decimal_whatever_their_leading_zeros(n, zeros):
    assert parse_yaml(f"x: {'0' * zeros}{n}", "spec") == {"x": n}


@FUZZ
@given(st.integers(min_value=0, max_value=59), st.integers(min_value=0, max_value=59))
def test_sexagesimal_forms_stay_strings(h, m):
    text = f"{h}:{m:02d}"
    assert parse_yaml(f"x: {text}", "spec") == {"x": text}  # YAML 1.1: h * 60 + m


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n", "Yes", "OFF", "2026-01-01", "1_000", "0b101"])
def test_yaml_1_1_forms_stay_strings(word):
    assert parse_yaml(f"x: {word}", "spec") == {"x": word}


@pytest.mark.parametrize(
    "text, value",
    [
        ("0x10", 16),
        ("0o17", 15),
        ("010", 10),
        ("-3", -3),
        ("true", True),
        ("False", False),
        ("~", None),
        ("null", None),
        ("1e-6", 1e-6),
        (".5", 0.5),
        ("-.inf", float("-inf")),
    ],
)
def test_yaml_1_2_core_forms(text, value):
    assert parse_yaml(f"x: {text}", "spec") == {"x": value}


_KEYS = st.text(string.ascii_lowercase, min_size=1, max_size=6)
_SCALARS = st.one_of(
    st.integers(-1000, 1000),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    st.text(string.ascii_letters, min_size=1, max_size=8),
)
_TREES = st.recursive(_SCALARS, lambda inner: st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12)


@FUZZ
@given(st.dictionaries(_KEYS, _TREES, min_size=1, max_size=5), st.data())
def test_a_key_written_twice_is_refused_wherever_it_is(tree, data):
    text = yaml.safe_dump(tree, sort_keys=False)
    lines = text.splitlines()
    top = [i for i, line in enumerate(lines) if line and not line.startswith(" ")]
    i = data.draw(st.sampled_from(top))
    key = lines[i].split(":")[0]
    doubled = "\n".join(lines + [f"{key}: 1"])
    with pytest.raises(InputError, match="given twice"):
        parse_yaml(doubled, "config")


def _mapping_over_scalar(layers) -> bool:
    seen: dict = {}
    for layer in layers:
        if _conflicts(seen, layer):
            return True
        merge_config(seen, layer)
    return False


def _conflicts(base: dict, over: dict) -> bool:
    for k, v in over.items():
        if isinstance(v, dict) and k in base and not isinstance(base[k], dict):
            return True
        if isinstance(v, dict) and isinstance(base.get(k), dict) and _conflicts(base[k], v):
            return True
    return False


def test_a_later_mapping_replaces_an_earlier_scalar(tmp_path):
    (tmp_path / "a.yaml").write_text("a: 0\n")
    (tmp_path / "b.yaml").write_text("a: {b: 1}\n")
    assert read_workflow_config([tmp_path / "a.yaml"], [tmp_path / "b.yaml"], {}) == {"a": {"b": 1}}


@FUZZ
@given(
    st.lists(st.dictionaries(_KEYS, _TREES, max_size=4), min_size=1, max_size=4),
    st.dictionaries(_KEYS, _SCALARS, max_size=3),
)
def test_config_files_are_layered_as_snakemake_layers_them(tmp_path_factory, layers, cli):
    from snakemake.utils import update_config

    # where a later layer gives a mapping for a key an earlier one gave a scalar, Snakemake keeps the
    # scalar (an empty mapping) or raises TypeError; the project's layering replaces it, as a later
    # file's value replaces an earlier one everywhere else. Those layerings are left out.
    assume(not _mapping_over_scalar([*layers, cli]))
    d = tmp_path_factory.mktemp("cfg")
    paths = []
    for k, layer in enumerate(layers):
        p = d / f"c{k}.yaml"
        p.write_text(yaml.safe_dump(layer))
        paths.append(p)
    ours = read_workflow_config(paths[:1], paths[1:], cli)
    theirs: dict = {}
    for layer in [*layers, cli]:
        update_config(theirs, layer)
    assert ours == theirs
    assert read_workflow_config(paths[:1], paths[1:], cli, replace_workflow_config=True) == merge_config(
        read_workflow_config([], paths[1:], {}), cli
    )


_SPEC_VALUES = st.one_of(
    _SCALARS, st.none(), st.lists(_SCALARS, max_size=3), st.dictionaries(_KEYS, _SCALARS, max_size=3)
)
_SPEC_KEYS = st.sampled_from(
    ["data", "domain", "tables", "budget", "neighbours", "method", "on_invalid", "postprocess", "seed", "zz"]
)


@FUZZ
@given(st.dictionaries(_SPEC_KEYS, _SPEC_VALUES, max_size=8))
def test_any_release_spec_mapping_parses_or_is_one_input_error(raw):
    try:
        parse_release_spec(raw)
    except InputError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(
    st.sampled_from(["rho", "mu", "beta", "epsilon"]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.one_of(st.none(), st.floats()),
)
def test_any_release_budget_parses_or_is_one_input_error(form, value, delta):
    budget = {form: value} if delta is None else {form: value, "delta": delta}
    raw = {"data": "d.csv", "domain": "dom.yaml", "tables": [{"marginal": ["a"]}], "budget": budget}
    try:
        spec = parse_release_spec(raw)
    except InputError:
        return
    assert 0 < spec.budget.beta < float("inf")
