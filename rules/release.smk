# Release mode: a custodian's named tables -> results/releases/{name}/ (querysmasher.release).
# Plans, re-checks the privacy cost, measures with OpenDP's sampler (OS entropy, never seeded),
# reconstructs and writes only the publishable tables and release.json. Its log holds release.json
# (no record count); its benchmark file (time, memory) grows with the number of records: keep it
# with the custodian, it is not part of the release. Both live outside results/releases/
# (querysmasher.pipeline.layout), so nothing but the release is ever written under a release's folder.


rule release:
    input:
        data=lambda wc: release_spec(wc).data,
        domain=lambda wc: release_spec(wc).domain,
    output:
        directory(layout.release_dir("{name}")),
    log:
        layout.release_log_path("{name}"),
    benchmark:
        layout.release_benchmark_path("{name}")
    threads: 1
    resources:
        # planning the spec's tables, the custodian's records, one view at a time
        mem_mb=lambda wildcards, attempt: release_resource(wildcards, "mem_mb", attempt),
        runtime=lambda wildcards, attempt: release_resource(wildcards, "runtime", attempt),
    params:
        spec=lambda wc: config["releases"][wc.name],
        lib=lambda wc: lib("release", release_spec(wc).method),
    script:
        "../scripts/release.py"
