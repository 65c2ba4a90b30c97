"""Rule reconstruct: plan + measurements -> answers.h5 (+ CSV tables) (querysmasher.pipeline.steps.reconstruct_to_file:
the plan kind's checks of the measurements and its reconstruct step, as the command line runs them)."""

from querysmasher.threads import cap_process

cap_process(snakemake.threads)  # noqa: F821  before numpy loads: the job uses the threads its rule declares

from querysmasher.pipeline import steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    csv_dir = sm.output.tables if "tables" in sm.output.keys() else None
    print(
        steps.reconstruct_to_file(
            sm.input.plan, sm.input.measurements, sm.output.answers, csv_dir=csv_dir, max_answers=sm.params.max_answers
        )
    )
