"""Rule release: a release spec from the config -> results/releases/{name}/ (querysmasher.release.run_release).

Release mode: OpenDP noise with OS entropy, no seed; nothing but the release is written.
"""

from querysmasher.threads import cap_process

cap_process(snakemake.threads)  # noqa: F821  before numpy loads: the job uses the threads its rule declares

import json

from querysmasher.pipeline import steps
from querysmasher.release import parse_release_spec, run_release

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    print(json.dumps(run_release(parse_release_spec(dict(sm.params.spec)), sm.output[0])))
