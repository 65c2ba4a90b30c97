"""Rule paper_table: every metrics.json of a paper config -> results/paper/table{N}.csv, .md and
figures (querysmasher.pipeline.paper_report.write_paper_outputs)."""

from querysmasher.threads import cap_process

cap_process(snakemake.threads)  # noqa: F821  before numpy loads: the job uses the threads its rule declares

import json
from pathlib import Path

from querysmasher.paper import load_paper_figures
from querysmasher.pipeline import paper_report, steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    metrics = [json.loads(Path(p).read_text()) for p in sm.input.metrics]
    figures = {name: sm.output[key] for key, name in dict(sm.params.figures).items()}
    print(
        paper_report.write_paper_outputs(
            int(sm.params.table),
            metrics,
            [dict(u) for u in sm.params.unsupported],
            dict(sm.params.labels),
            sm.output.csv,
            sm.output.md,
            figures,
            figs=load_paper_figures(sm.input.paper),
        )
    )
