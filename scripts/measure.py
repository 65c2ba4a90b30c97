"""Rule measure: plan + records -> measurements.h5, the release (querysmasher.pipeline.steps.measure_to_file:
the plan kind's privacy re-check and measure step, as the command line runs them).

The only rule of a release that reads records; the noise seed is the experiment's seed.
"""

from querysmasher.threads import cap_process

cap_process(snakemake.threads)  # noqa: F821  before numpy loads: the job uses the threads its rule declares

from querysmasher.pipeline import steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    print(steps.measure_to_file(sm.input.plan, sm.output[0], source=dict(sm.params.source), seed=sm.params.seed))
