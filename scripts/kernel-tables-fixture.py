#!/usr/bin/env python3
"""Writes the tests' compact extract of AIConfigurator's H100 TensorRT-LLM tables, in the
CSV form `twin calibrate --from-tables` reads (the same columns as the parquet files):

    pip install pyarrow
    scripts/kernel-tables-fixture.py TABLES_DIR tests/fixtures/kernel-tables

TABLES_DIR as scripts/fetch-kernel-tables.sh writes it. The extract keeps whole sweeps
(every M, every token count, every context) of a few shapes per family, so the fit's
split by distinct shape works on it as on the full tables."""
import sys, os
import pyarrow.parquet as pq
import pyarrow.compute as pc

src, dst = sys.argv[1], sys.argv[2]
base = "h100_sxm/{fam}/{eng}/{ver}/{stem}"
sets = [
    ("gemm", "trtllm", "1.3.0rc20", "gemm_perf",
     lambda t: t.filter(pc.and_(pc.is_in(t["gemm_dtype"], value_set=__import__("pyarrow").array(["bfloat16", "fp8"])),
                                pc.and_(pc.is_in(t["n"], value_set=__import__("pyarrow").array([1024, 2048, 4096, 8192, 16384])),
                                        pc.is_in(t["k"], value_set=__import__("pyarrow").array([1024, 2048, 4096, 8192, 16384])))))),
    ("attention", "trtllm", "1.3.0rc20", "generation_attention_perf",
     lambda t: t.filter(pc.and_(pc.equal(t["kv_cache_dtype"], "bfloat16"),
                                pc.and_(pc.equal(t["head_dim"], 128),
                                        pc.and_(pc.equal(t["window_size"], 0), pc.equal(t["num_key_value_heads"], 8)))))),
    ("moe", "trtllm", "1.3.0rc20", "moe_perf",
     lambda t: t.filter(pc.and_(pc.equal(t["moe_dtype"], "fp8_block"),
                                pc.and_(pc.equal(t["distribution"], "balanced"), pc.equal(t["hidden_size"], 7168))))),
    ("comm", "trtllm", "1.3.0rc20", "custom_allreduce_perf", lambda t: t),
    ("comm", "nccl", "2.29.2", "nccl_perf", lambda t: t),
]
for fam, eng, ver, stem, keep in sets:
    t = keep(pq.read_table(os.path.join(src, base.format(fam=fam, eng=eng, ver=ver, stem=stem) + ".parquet")))
    out = os.path.join(dst, base.format(fam=fam, eng=eng, ver=ver, stem=stem) + ".csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    t.to_pandas().to_csv(out, index=False)
    print(out, t.num_rows)
