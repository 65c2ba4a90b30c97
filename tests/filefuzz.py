"""Corrupted plan and measurements files, run through the CLI (tests only; tests/test_file_fuzz.py).

A corpus of real files (one plan of every mechanism kind and its measurements) is corrupted one way
at a time: a bit or byte flipped at a seeded random offset, the file truncated, or one HDF5 field
(an attribute, a key inside a JSON attribute, or a dataset) replaced by a value of the wrong type,
shape or range. Every variant runs ``measure`` and ``reconstruct`` through
:func:`querysmasher.cli.main`, in a worker process (a crash in HDF5's C code, a runaway allocation
or a hang cannot take the test run down: the worker is restarted after the variant that killed it).

Each run must end with exit code 0 or 2; on 2 with exactly one stderr line ``querysmasher: error:
...`` and nothing written; never a traceback; the input files unchanged; and when ``measure``
succeeds, the privacy cost of what it applied, built over the full domain from the operators it
applies (unit vectors through ``sqrt_apply``, or HDMM's measure with a recording noise source), is
at most the budget the release records.

``python tests/filefuzz.py [N_FIELD N_FLIP [SEED]]`` prints the outcome counts by class (the report
of issue 19 item 7; by default the slow test's 1,600 variants); with PYTHONPATH pointing at another
source tree it measures that tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import h5py
import numpy as np

SCHEMA = "synthetic:n=4,d=3"
COLUMNS = ["a0", "a1", "a2"]
# One plan per mechanism kind: (plan arguments, the kinds its file stores)
KINDS = {
    "kron": ["--workload", "prefix:1,2", "--method", "rp"],  # kron
    "eigenpairs": ["--workload", "prefix:1,2+marginal:2", "--method", "qs"],  # dense X stored as lowrank eigenpairs
    "queryfactor": ["--workload", "affine:2", "--method", "qs"],  # lowrank held over its query factor
    "fourier": ["--workload", "range:1,2+circular:2", "--method", "wff"],  # fourier
    "random": ["--workload", "random[seed=3]:2", "--method", "qs"],  # random views (eigenpairs)
    "hdmm": ["--workload", "marginal:1,2", "--method", "hdmm"],  # HDMM, Gaussian, several blocks
    "hdmm-laplace": ["--workload", "prefix:1,2", "--method", "hdmm", "--noise", "laplace", "--epsilon", "1"],
}
HDMM_KINDS = ("hdmm", "hdmm-laplace")
VARIANT_SECONDS = 60  # a variant taking longer is a failure (a hang); the slowest take about a second
PROBE_SECONDS = 10  # the CLI's limit on HDF5 reading a file's structure (60 s by default), shorter here
WORKER_MEMORY = 6 << 30  # address space of the worker: a runaway allocation fails instead of swapping


# ---- the corpus ---------------------------------------------------------------------------------


def build_corpus(folder: Path) -> dict[str, dict[str, str]]:
    """Plan, measurements and records files of every kind in ``folder`` (built once)."""
    import pandas as pd

    from querysmasher.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "data.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 4, (60, 3)), columns=COLUMNS).to_csv(data, index=False)
    corpus = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for kind, argv in KINDS.items():
            plan, meas = folder / f"{kind}.plan.h5", folder / f"{kind}.meas.h5"
            assert main(["plan", "--schema", SCHEMA, *argv, "--out", str(plan), "-q"]) == 0, kind
            assert (
                main(["measure", "--plan", str(plan), "--data", str(data), "--out", str(meas), "--seed", "1", "-q"])
                == 0
            ), kind
            corpus[kind] = {"plan": str(plan), "meas": str(meas), "data": str(data)}
    return corpus


# ---- mutations: plain data, applied by apply_mutation -------------------------------------------

JSON_ATTRS = ("schema", "budget", "summary", "candidates", "notes")
ATTR_VALUES = ("delete", "string", "bytes", "nan", "inf", "huge", "big", "negative", "zero", "array", "empty")
JSON_VALUES = ("delete", "string", "nan", "huge", "big", "negative", "null", "list", "float")
DATASET_VALUES = (
    "delete",
    "nan",
    "inf",
    "huge",
    "big",
    "all-big",
    "negative",
    "string",
    "other-dtype",
    "shorter",
    "longer",
    "extra-axis",
    "scalar",
    "empty",
)


def _objects(f: h5py.File) -> list[tuple[str, h5py.HLObject]]:
    out = [("/", f)]
    f.visititems(lambda name, obj: out.append((name, obj)) and None)
    return out


def _json_paths(value, prefix=(), depth=3) -> list[tuple]:
    """Paths to the leaves (and containers) of a JSON value, up to ``depth`` keys deep."""
    out = [prefix] if prefix else []
    if depth == 0:
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            out += _json_paths(v, prefix + (k,), depth - 1)
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            out += _json_paths(v, prefix + (i,), depth - 1)
    return out


def field_mutations(kind: str, target: str, path: str) -> list[dict]:
    """Every single-field corruption of one file: each attribute, each key of its JSON attributes and
    each dataset, with every value of the wrong type, shape or range."""
    out = []
    with h5py.File(path, "r") as f:
        for name, obj in _objects(f):
            for attr in obj.attrs:
                if attr in JSON_ATTRS:
                    out.append({"how": "json", "object": name, "attr": attr, "key": [], "value": "invalid"})
                    for key in _json_paths(json.loads(obj.attrs[attr])):
                        out += [
                            {"how": "json", "object": name, "attr": attr, "key": list(key), "value": v}
                            for v in JSON_VALUES
                        ]
                else:
                    out += [{"how": "attr", "object": name, "attr": attr, "value": v} for v in ATTR_VALUES]
            if isinstance(obj, h5py.Dataset):
                out += [{"how": "dataset", "object": name, "value": v} for v in DATASET_VALUES]
    for m in out:
        m.update(kind=kind, target=target)
    return out


def flip_mutations(kind: str, target: str, path: str, count: int, rng: np.random.Generator) -> list[dict]:
    """``count`` seeded corruptions of the raw bytes: one bit, one byte, or eight bits flipped at
    random offsets, or the file truncated."""
    size = os.path.getsize(path)
    out = []
    for _ in range(count):
        how = str(rng.choice(["bit", "byte", "bits", "truncate"], p=[0.4, 0.3, 0.2, 0.1]))
        if how == "truncate":
            out.append({"how": how, "length": int(rng.integers(0, size))})
        else:
            n = 8 if how == "bits" else 1
            out.append(
                {
                    "how": how,
                    "offsets": rng.integers(0, size, n).tolist(),
                    "bits": rng.integers(0, 8, n).tolist(),
                    "xor": int(rng.integers(1, 256)),
                }
            )
    for m in out:
        m.update(kind=kind, target=target)
    return out


def _replacement(value: str, like: np.ndarray | None = None):
    integer = like is not None and like.dtype.kind in "iub"
    return {
        "string": "x",
        "bytes": np.bytes_(b"\xff\xfe\x00bad"),
        "nan": math.nan,
        "inf": math.inf,
        "huge": 1e300,
        "big": 10**6 if integer or like is None else 1e6,
        "negative": -5,
        "zero": 0,
        "array": np.arange(3),
        "empty": "",
    }[value]


def _json_value(value: str):
    return {
        "string": "x",
        "nan": math.nan,
        "huge": 1e300,
        "big": 10**6,
        "negative": -5,
        "null": None,
        "list": [],
        "float": 0.5,
    }[value]


def _edit_json(doc, key: list, value: str):
    if not key:
        return doc
    parent = doc
    for k in key[:-1]:
        parent = parent[k]
    if value == "delete":
        if isinstance(parent, list):
            parent.pop(key[-1])
        else:
            del parent[key[-1]]
    else:
        parent[key[-1]] = _json_value(value)
    return doc


def _edit_dataset(group: h5py.Group, name: str, value: str, rng: np.random.Generator) -> None:
    ds = group[name]
    data = ds[()]
    arr = np.array(data)
    del group[name]
    if value == "delete":
        return
    if value in ("nan", "inf", "huge", "big", "negative"):
        number = {
            "nan": math.nan,
            "inf": math.inf,
            "huge": 1e300 if arr.dtype.kind == "f" else 2**62,
            "big": 10**6,
            "negative": -5,
        }[value]
        if arr.dtype.kind in "iu" and value in ("nan", "inf"):
            arr = arr.astype(float)
        elif arr.dtype.kind not in "iufb":
            arr = np.full(arr.shape, number, dtype=float)
        if arr.size:
            arr = arr.copy()
            arr.flat[int(rng.integers(arr.size))] = number
        else:
            arr = np.array([number])
    elif value == "all-big":  # e.g. sizes claiming 10^6 x 10^6 cells
        arr = np.full(arr.shape if arr.ndim else (), 10**6, dtype=np.int64 if arr.dtype.kind in "iub" else float)
    elif value == "string":
        arr = np.full(arr.shape, "x", dtype=object)
        group.create_dataset(name, data=arr, dtype=h5py.string_dtype())
        return
    elif value == "other-dtype":
        arr = (
            arr.astype(float) + 0.5
            if arr.dtype.kind in "iub"
            else np.zeros(arr.shape, dtype=np.int64)
            if arr.dtype.kind == "f"
            else np.zeros(arr.shape)
        )
    elif value == "shorter":
        arr = arr[:-1] if arr.ndim else arr.reshape(1)[:0]
    elif value == "longer":
        arr = np.concatenate([arr, arr[-1:]]) if arr.ndim and len(arr) else np.zeros(2)
    elif value == "extra-axis":
        arr = arr[None]
    elif value == "scalar":
        arr = arr.reshape(-1)[0] if arr.size else np.float64(0)
    elif value == "empty":
        arr = np.zeros((0,) + arr.shape[1:], dtype=arr.dtype)
    group.create_dataset(name, data=arr)


def apply_mutation(m: dict, src: str, dst: str) -> None:
    """Write the corrupted copy of ``src`` described by ``m`` to ``dst``."""
    raw = bytearray(Path(src).read_bytes())
    if m["how"] in ("bit", "bits", "byte"):
        for off, bit in zip(m["offsets"], m["bits"]):
            raw[off] ^= m["xor"] if m["how"] == "byte" else 1 << bit
        Path(dst).write_bytes(bytes(raw))
        return
    if m["how"] == "truncate":
        Path(dst).write_bytes(bytes(raw[: m["length"]]))
        return
    Path(dst).write_bytes(bytes(raw))
    rng = np.random.default_rng(int(hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()[:8], 16))
    with h5py.File(dst, "r+") as f:
        obj = f[m["object"]]
        if m["how"] == "attr":
            if m["value"] == "delete":
                del obj.attrs[m["attr"]]
            else:
                obj.attrs[m["attr"]] = _replacement(m["value"], np.asarray(obj.attrs[m["attr"]]))
        elif m["how"] == "json":
            if m["value"] == "invalid":
                obj.attrs[m["attr"]] = "{"
            else:
                doc = _edit_json(json.loads(obj.attrs[m["attr"]]), m["key"], m["value"])
                obj.attrs[m["attr"]] = json.dumps(doc)
        else:
            parent, _, name = m["object"].rpartition("/")
            _edit_dataset(f[parent or "/"], name, m["value"], rng)


def describe(m: dict) -> str:
    if m["how"] in ("bit", "bits", "byte"):
        return f"{m['kind']} {m['target']}: {m['how']} at {m['offsets'][:3]}"
    if m["how"] == "truncate":
        return f"{m['kind']} {m['target']}: truncated to {m['length']} bytes"
    where = (
        m["object"]
        + ("" if m["how"] == "dataset" else f"@{m['attr']}")
        + ("".join(f"[{k!r}]" for k in m.get("key", [])))
    )
    return f"{m['kind']} {m['target']}: {where} = {m['value']}"


def sample_variants(corpus: dict, n_field: int, n_flip: int, seed: int) -> list[dict]:
    """``n_field`` single-field and ``n_flip`` raw-byte corruptions, spread evenly over the corpus's
    files (seeded)."""
    rng = np.random.default_rng(seed)
    files = [(k, t, corpus[k][t]) for k in corpus for t in ("plan", "meas")]
    out = []
    for i, (kind, target, path) in enumerate(files):
        share = n_field // len(files) + (i < n_field % len(files))
        pool = field_mutations(kind, target, path)
        out += [pool[j] for j in rng.choice(len(pool), min(share, len(pool)), replace=False)]
        out += flip_mutations(kind, target, path, n_flip // len(files) + (i < n_flip % len(files)), rng)
    return out


# ---- running one variant (in the worker) --------------------------------------------------------


class _Recorder:
    """A noise source that adds no noise and records each (clean vector, scale) measure releases."""

    def __init__(self):
        from querysmasher.noise import NoiseSource

        class Source(NoiseSource):
            def add_gaussian(src, clean, sigma2, draws=None, sensitivity2=None):
                self.calls.append(("gaussian", np.array(clean, dtype=float), float(sigma2)))
                return np.array(clean, dtype=float)

            def add_laplace(src, clean, scale, sensitivity):
                self.calls.append(("laplace", np.array(clean, dtype=float), float(scale)))
                return np.array(clean, dtype=float)

        self.calls: list = []
        self.source = Source("numpy", True, np.random.default_rng(0))


def hdmm_applied_cost(plan) -> float:
    """Privacy cost of what HDMM's measure applies, over the full domain: for each cell, every
    released vector of a single record in that cell through the shared ``measure`` (its privacy
    re-check included) with
    a recording noise source; Gaussian: max over cells of sum |A e|^2 / sigma^2 (beta, add-remove);
    Laplace: max over cells of sum |A e|_1 / b (epsilon)."""
    from querysmasher.measure import measure
    from querysmasher.testing import records_of_counts

    cells = plan.schema.domain_cells()
    worst = 0.0
    for x in range(cells):
        rec = _Recorder()
        measure(plan, records_of_counts(plan.schema, np.eye(cells, dtype=np.int64)[x]), rec.source)
        total = sum(
            float(np.sum(c * c)) / s if how == "gaussian" else float(np.sum(np.abs(c))) / s for how, c, s in rec.calls
        )
        worst = max(worst, total)
    return worst


def applied_cost(plan_path: str, recorded_budget: dict) -> tuple[float, float]:
    """(privacy cost of what measure applied for this plan file, the budget its release records)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bruteforce import applied_full_privacy_gram, cost

    from querysmasher.io import read_kind

    if read_kind(plan_path) == "hdmm-plan":
        from querysmasher.hdmm.files import load_hdmm_plan

        plan = load_hdmm_plan(plan_path)
        laplace = plan.noise == "laplace"
        return hdmm_applied_cost(plan), float(recorded_budget["epsilon" if laplace else "beta"])
    from querysmasher.planfile import load_plan

    plan = load_plan(plan_path)
    return cost(applied_full_privacy_gram(plan), recorded_budget["neighbours"]), float(recorded_budget["beta"])


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"more than {VARIANT_SECONDS} s")


def _digest(paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).read_bytes() if Path(p).is_file() else b"<absent>")
    return h.hexdigest()


def _cli(argv: list[str], inputs: list[str], out_dir: Path) -> dict:
    """One CLI run in this process: exit code, stderr lines (fd 2 itself, so HDF5's C messages
    count), the exception that escaped main (if any), what was written, whether inputs changed."""
    from querysmasher.cli import main

    before = _digest(inputs)
    out_dir.mkdir(parents=True, exist_ok=True)
    errfile = out_dir.parent / (out_dir.name + ".stderr")
    saved_fd, saved_err = os.dup(2), sys.stderr
    escaped = None
    with open(errfile, "w+") as err:
        os.dup2(err.fileno(), 2)
        sys.stderr = err
        signal.alarm(VARIANT_SECONDS)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # noqa: BLE001 - what escapes is the finding
            code, escaped = None, f"{type(exc).__name__}: {str(exc)[:200]}"
            traceback.print_exc(file=err)
        finally:
            signal.alarm(0)
            sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            sys.stderr = saved_err
        err.seek(0)
        lines = [line for line in err.read().splitlines() if line.strip()]
    return {
        "argv": argv,
        "code": code,
        "stderr": lines,
        "escaped": escaped,
        "written": sorted(p.name for p in out_dir.iterdir()),
        "inputs_unchanged": _digest(inputs) == before,
    }


def run_variant(m: dict, corpus: dict, work: Path) -> list[dict]:
    """Corrupt one file and run the commands that read it; one record per command."""
    from querysmasher.measure import plan_digest

    src = corpus[m["kind"]]
    work.mkdir(parents=True, exist_ok=True)
    bad = work / f"bad.{m['target']}.h5"
    apply_mutation(m, src[m["target"]], str(bad))
    runs = []
    if m["target"] == "meas":
        out = work / "reconstruct"
        runs.append(
            (
                "reconstruct",
                _cli(
                    [
                        "reconstruct",
                        "--plan",
                        src["plan"],
                        "--measurements",
                        str(bad),
                        "--out",
                        str(out / "answers.h5"),
                        "-q",
                    ],
                    [src["plan"], str(bad)],
                    out,
                ),
            )
        )
        return [dict(r, command=c) for c, r in runs]
    out = work / "measure"
    measured = _cli(
        ["measure", "--plan", str(bad), "--data", src["data"], "--out", str(out / "meas.h5"), "--seed", "2", "-q"],
        [str(bad), src["data"]],
        out,
    )
    if measured["code"] == 0 and measured["written"] == ["meas.h5"]:
        with h5py.File(out / "meas.h5", "r") as f:
            budget = json.loads(f.attrs["budget"])
        try:
            measured["cost"], measured["budget"] = applied_cost(str(bad), budget)
        except Exception as exc:  # noqa: BLE001
            measured["cost_error"] = f"{type(exc).__name__}: {exc}"
        meas = out / "meas.h5"
    else:  # the original release, as if made with the corrupted plan: reconstruct reads the plan
        meas = work / "meas-for-bad-plan.h5"
        shutil.copyfile(src["meas"], meas)
        with h5py.File(meas, "r+") as f:
            f.attrs["plan_sha256"] = plan_digest(bad)
    runs.append(("measure", measured))
    out = work / "reconstruct"
    runs.append(
        (
            "reconstruct",
            _cli(
                [
                    "reconstruct",
                    "--plan",
                    str(bad),
                    "--measurements",
                    str(meas),
                    "--out",
                    str(out / "answers.h5"),
                    "-q",
                ],
                [str(bad), str(meas)],
                out,
            ),
        )
    )
    return [dict(r, command=c) for c, r in runs]


def worker(spec_path: str, start: int, results_path: str) -> None:
    """Run the variants of ``spec_path`` from ``start`` on, one JSON line per event."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(
        resource.RLIMIT_AS, (min(WORKER_MEMORY, hard) if hard != resource.RLIM_INFINITY else WORKER_MEMORY, hard)
    )
    signal.signal(signal.SIGALRM, _alarm)
    try:
        from querysmasher import h5read

        h5read.PROBE_SECONDS = PROBE_SECONDS
    except ImportError:  # a source tree from before the checked reads (the report's "before")
        pass
    spec = json.loads(Path(spec_path).read_text())
    corpus, variants, work = spec["corpus"], spec["variants"], Path(spec["work"])
    with open(results_path, "a") as out:
        for i in range(start, len(variants)):
            out.write(json.dumps({"start": i}) + "\n")
            out.flush()
            t0 = time.perf_counter()
            try:
                runs = run_variant(variants[i], corpus, work / str(i))
            except BaseException as exc:  # noqa: BLE001 - a broken harness is a finding too
                runs = [
                    {
                        "command": "harness",
                        "code": None,
                        "stderr": [],
                        "escaped": f"harness {type(exc).__name__}: {exc}",
                        "written": [],
                        "inputs_unchanged": True,
                    }
                ]
            out.write(json.dumps({"done": i, "runs": runs, "seconds": time.perf_counter() - t0}) + "\n")
            out.flush()
            shutil.rmtree(work / str(i), ignore_errors=True)


class _Events:
    """The worker's results file, read incrementally: finished variants and the one running."""

    def __init__(self, path: Path):
        self.path, self.offset, self.done, self.started = path, 0, {}, None

    def update(self) -> int | None:
        """The variant started last if it has not finished."""
        with open(self.path) as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            event = json.loads(line)
            if "done" in event:
                self.done[event["done"]] = event["runs"]
            else:
                self.started = event["start"]
        return self.started if self.started is not None and self.started not in self.done else None


def _failed_run(kind: str, detail: str) -> list[dict]:
    return [
        {
            "command": "worker",
            "code": None,
            "stderr": [detail],
            "escaped": kind,
            "written": [],
            "inputs_unchanged": True,
        }
    ]


def run_all(corpus: dict, variants: list[dict], work: Path) -> list[list[dict]]:
    """Run every variant in a worker process; a variant that kills the worker (a crash) or runs
    longer than ``VARIANT_SECONDS`` (a hang, e.g. inside HDF5's C code, where no Python signal
    handler runs) is recorded as such, and a new worker continues after it."""
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "spec.json"
    spec.write_text(json.dumps({"corpus": corpus, "variants": variants, "work": str(work / "runs")}))
    results = work / "results.jsonl"
    results.write_text("")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]),
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
    )
    failed: dict[int, list] = {}
    events = _Events(results)
    start = 0
    while start < len(variants):
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(spec), str(start), str(results)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen, since = None, time.monotonic()
        while proc.poll() is None:
            time.sleep(0.2)
            current = events.update()
            if current != seen:
                seen, since = current, time.monotonic()
            elif current is not None and time.monotonic() - since > VARIANT_SECONDS:
                proc.kill()
                proc.wait()
                failed[current] = _failed_run("hang", f"no result after {VARIANT_SECONDS} s")
                break
        err = proc.stderr.read() if proc.stderr else ""
        current = events.update()
        if current is not None and current not in failed:  # the worker died inside this variant
            failed[current] = _failed_run(
                f"crash (exit {proc.returncode})", err.strip().splitlines()[-1] if err.strip() else ""
            )
        finished = set(events.done) | set(failed)
        start = next((i for i in range(len(variants)) if i not in finished), len(variants))
        if proc.returncode == 0 and start < len(variants):
            raise RuntimeError(f"worker ended without running variant {start}: {err[-2000:]}")
    return [events.done.get(i) or failed[i] for i in range(len(variants))]


# ---- judging ------------------------------------------------------------------------------------


def problems(run: dict) -> list[str]:
    """What is wrong with one command's run (empty: it kept the promise)."""
    out = []
    if run.get("escaped"):
        return [f"exception {run['escaped']}"]
    if run["code"] not in (0, 2):
        out.append(f"exit code {run['code']}")
    if any("Traceback" in line for line in run["stderr"]):
        out.append("traceback on stderr")
    if run["code"] == 2:
        if len(run["stderr"]) != 1 or not run["stderr"][0].startswith("querysmasher: error:"):
            out.append(f"stderr is not one error line: {run['stderr'][:3]}")
        if run["written"]:
            out.append(f"wrote {run['written']} on exit 2")
    if not run["inputs_unchanged"]:
        out.append("an input file changed")
    if run["command"] == "measure" and run["code"] == 0 and "cost" not in run and "cost_error" not in run:
        out.append(f"measured, but wrote {run['written']}: no release to check the privacy cost of")
    if "cost_error" in run:
        out.append(f"measured, but its cost cannot be recomputed: {run['cost_error']}")
    if "cost" in run and not run["cost"] <= run["budget"]:
        out.append(f"measured at privacy cost {run['cost']!r} > recorded budget {run['budget']!r}")
    return out


def outcome_class(run: dict) -> str:
    """One label per run for the report: ok, refused, or the kind of failure."""
    found = problems(run)
    if not found:
        return "ok (exit 0)" if run["code"] == 0 else "refused (exit 2, one line)"
    if run.get("escaped"):
        return run["escaped"].split(":")[0]
    return found[0].split(":")[0]


def report(results: list[list[dict]], variants: list[dict]) -> Counter:
    counts = Counter()
    for m, runs in zip(variants, results):
        for r in runs:
            counts[(r["command"], outcome_class(r))] += 1
    return counts


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        sys.exit(0)
    n_field, n_flip = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (1000, 600)
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 19  # the slow test's variants by default
    with tempfile.TemporaryDirectory() as tmp:
        corpus = build_corpus(Path(tmp) / "corpus")
        variants = sample_variants(corpus, n_field, n_flip, seed=seed)
        results = run_all(corpus, variants, Path(tmp) / "work")
        counts = report(results, variants)
        bad = sum(any(problems(r) for r in runs) for runs in results)
        print(f"{len(variants)} variants, {bad} with a failure")
        for (command, label), n in sorted(counts.items()):
            print(f"{command:12s} {label:45s} {n}")
        for m, runs in zip(variants, results):
            for r in runs:
                if problems(r):
                    print("FAIL", describe(m), "|", r["command"], "|", "; ".join(problems(r))[:300])
