"""Rule measure: plan + records -> measurements.h5, the release (stages.measure_to_file).

The only rule of a release that reads records; the noise seed is the experiment's seed.
"""

from querysmasher import logs, stages

sm = snakemake  # noqa: F821  (injected by the script: directive)
with stages.logged(sm.log[0]), logs.configured():
    print(stages.measure_to_file(sm.input.plan, sm.output[0], source=dict(sm.params.source), seed=sm.params.seed))
