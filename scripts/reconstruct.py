"""Rule reconstruct: plan + measurements -> answers.h5 (+ CSV tables) (stages.reconstruct_to_file)."""

from querysmasher import logs, stages

sm = snakemake  # noqa: F821  (injected by the script: directive)
with stages.logged(sm.log[0]), logs.configured():
    csv_dir = sm.output.tables if "tables" in sm.output.keys() else None
    print(stages.reconstruct_to_file(sm.input.plan, sm.input.measurements, sm.output.answers, csv_dir=csv_dir, max_answers=sm.params.max_answers))
