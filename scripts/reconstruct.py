"""Rule reconstruct: plan + measurements -> answers.h5 (+ CSV tables) (querysmasher.pipeline.steps.reconstruct_to_file;
querysmasher.pipeline.hdmm_steps.reconstruct_hdmm for an HDMM plan)."""

from pathlib import Path

from querysmasher.io import read_kind
from querysmasher.pipeline import hdmm_steps, steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    if read_kind(sm.input.plan) == "hdmm-plan":  # answers per view, no per-view CSV tables
        print(hdmm_steps.reconstruct_hdmm(sm.input.plan, sm.input.measurements, sm.output.answers))
        if "tables" in sm.output.keys():
            Path(sm.output.tables).mkdir(parents=True, exist_ok=True)  # HDMM has no per-view tables
    else:
        csv_dir = sm.output.tables if "tables" in sm.output.keys() else None
        print(steps.reconstruct_to_file(sm.input.plan, sm.input.measurements, sm.output.answers, csv_dir=csv_dir, max_answers=sm.params.max_answers))
