"""Rule measure: plan + records -> measurements.h5, the release (querysmasher.pipeline.steps.measure_to_file;
querysmasher.pipeline.hdmm_steps.measure_hdmm for an HDMM plan).

The only rule of a release that reads records; the noise seed is the experiment's seed.
"""

from querysmasher.io import read_kind
from querysmasher.pipeline import hdmm_steps, steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    step = hdmm_steps.measure_hdmm if read_kind(sm.input.plan) == "hdmm-plan" else steps.measure_to_file
    print(step(sm.input.plan, sm.output[0], source=dict(sm.params.source), seed=sm.params.seed))
