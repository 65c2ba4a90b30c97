# Stage 8: every experiment of the grid -> results/tables/*.csv and results/figures/*.png
# (paper configs: under results/paper/table{N}-grid/, one folder per table's grid)
# (also shown by `snakemake --report report.html`).


rule aggregate:
    input:
        experiment_targets(),
    output:
        experiments=report(AGGREGATE_TABLES[0], category="Tables", labels={"table": "experiments"}),
        rmse=report(AGGREGATE_TABLES[1], category="Tables", labels={"table": "RMSE by method"}),
        resources=report(AGGREGATE_TABLES[2], category="Tables", labels={"table": "time and memory"}),
        fig_rmse=report(AGGREGATE_FIGURES[0], category="Figures", labels={"figure": "RMSE by method and workload"}),
        fig_time=report(AGGREGATE_FIGURES[1], category="Figures", labels={"figure": "time vs residual views"}),
        fig_memory=report(AGGREGATE_FIGURES[2], category="Figures", labels={"figure": "memory vs residual views"}),
    log:
        f"{_AGG}/logs/aggregate.log",
    benchmark:
        f"{_AGG}/benchmarks/aggregate.tsv"
    threads: 1  # numerical work single-threaded (querysmasher.threads); the grid runs jobs side by side
    resources:
        mem_mb=grid_resource("aggregate", "mem_mb"),
        runtime=grid_resource("aggregate", "runtime"),
    params:
        lib=lib("aggregate"),
    script:
        "../scripts/aggregate.py"
