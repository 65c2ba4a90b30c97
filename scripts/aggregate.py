"""Rule aggregate: every metrics.json of the grid -> results/tables/*.csv, results/figures/*.png."""

from pathlib import Path

from querysmasher import logs, stages

sm = snakemake  # noqa: F821  (injected by the script: directive)
with stages.logged(sm.log[0]), logs.configured():
    print(stages.aggregate(list(sm.input), Path(sm.output.experiments).parent, Path(sm.output.fig_rmse).parent))
