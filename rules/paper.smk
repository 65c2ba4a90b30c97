# Stage 9 (paper configs only, config key `paper:`): the paper's table beside ours ->
# results/paper/table{N}.csv and .md, and its figures under results/paper/figures/ (also shown with
# captions by `snakemake --report results/paper/report.html`). See querysmasher.pipeline.paper_report.

from querysmasher.paper import PAPER_FIGURES_FILE
from querysmasher.pipeline.paper_plots import FIGURES as PAPER_FIGURE_NAMES

PAPER = config.get("paper")
PAPER_OUTPUTS = []

if PAPER:
    _T = int(PAPER["table"])
    _FIGS = {
        f"fig_{name.replace('-', '_')}": (name, f"{R}/paper/figures/table{_T}-{name}.png")
        for name in PAPER_FIGURE_NAMES[_T]
    }
    PAPER_OUTPUTS = [f"{R}/paper/table{_T}.csv", f"{R}/paper/table{_T}.md"] + [p for _, p in _FIGS.values()]

    rule paper_table:
        input:
            metrics=experiment_targets(),
            paper=str(PAPER_FIGURES_FILE),  # the paper's figures (data, not code: an edit re-runs this rule)
        output:
            **{
                key: report(
                    path,
                    caption=f"../workflow/report/paper_{name}.rst",
                    category="Paper",
                    labels={"table": f"Table {_T}", "file": name},
                )
                for key, (name, path) in _FIGS.items()
            },
            csv=report(
                f"{R}/paper/table{_T}.csv",
                caption=f"../workflow/report/paper_table{_T}.rst",
                category="Paper",
                labels={"table": f"Table {_T}", "file": "csv"},
            ),
            md=report(
                f"{R}/paper/table{_T}.md",
                caption=f"../workflow/report/paper_table{_T}.rst",
                category="Paper",
                labels={"table": f"Table {_T}", "file": "md"},
            ),
        log:
            f"{R}/logs/paper_table{_T}.log",
        benchmark:
            f"{R}/benchmarks/paper_table{_T}.tsv"
        threads: 1  # numerical work single-threaded (querysmasher.threads); the grid runs jobs side by side
        resources:
            mem_mb=grid_resource("paper", "mem_mb"),
            runtime=grid_resource("paper", "runtime"),
        params:
            table=_T,
            labels=dict(PAPER["workloads"]),
            unsupported=sorted(UNSUPPORTED.values(), key=lambda u: u["experiment"]),
            figures={key: name for key, (name, _) in _FIGS.items()},
            lib=lib("paper"),
        script:
            "../scripts/paper_report.py"
