"""Rule evaluate: predicted vs empirical RMSE, phase times, peak memory -> metrics.json
(querysmasher.pipeline.evaluate.evaluate, for plans of every kind).
Reads the records to compute true answers: an evaluation, not a release."""

from querysmasher.threads import cap_process

cap_process(snakemake.threads)  # noqa: F821  before numpy loads: the job uses the threads its rule declares

from querysmasher.pipeline.evaluate import evaluate
from querysmasher.pipeline.steps import logged

sm = snakemake  # noqa: F821  (injected by the script: directive)
with logged(sm.log[0]):
    keys = sm.input.keys()
    m = evaluate(
        sm.input.plan,
        sm.output[0],
        manifest_path=sm.input.manifest,
        benchmarks={s: sm.input[f"bench_{s}"] for s in sm.params.stages},
        answers_path=sm.input.answers if "answers" in keys else None,
        source=dict(sm.params.source) if sm.params.source else None,
        experiment=dict(sm.params.experiment),
    )
    print({k: m.get(k) for k in ("predicted_rmse", "empirical_rmse", "total_seconds", "peak_memory_mb")})
