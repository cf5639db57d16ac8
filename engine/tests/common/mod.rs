//! What the serving tests share: a small model with every kind of layer.

use engine::serve::{AttnKind, IndexerConfig, LayerConfig, LinearDtype, ModelConfig, MoeConfig};

/// Four layers (sparse with the indexer and the window branch, sparse, dense without
/// MoE, window), 8 experts top-2, a shared expert and an MTP head.
#[allow(dead_code)]
pub fn tiny() -> ModelConfig {
    let layer = |attention, window_branch, has_indexer, moe| LayerConfig {
        attention,
        window_branch,
        has_indexer,
        moe,
    };
    ModelConfig {
        name: "test-tiny".into(),
        hidden: 256,
        vocab: 512,
        heads: 2,
        latent: 128,
        window: 16,
        indexer: Some(IndexerConfig {
            heads: 2,
            dim: 32,
            topk: 8,
        }),
        layers: vec![
            layer(AttnKind::Sparse, true, true, true),
            layer(AttnKind::Sparse, false, false, true),
            layer(AttnKind::Dense, false, false, false),
            layer(AttnKind::Window, false, false, true),
        ],
        moe: Some(MoeConfig {
            experts: 8,
            top_k: 2,
            expert_ffn: 256,
            shared_ffn: 256,
        }),
        dense_ffn: 256,
        mtp_ffn: 256,
        weight_dtype: LinearDtype::Bf16,
        page_size: 16,
    }
}

/// The GPU, when one is usable; otherwise why not, printed (`TWIN_REQUIRE_GPU=1` turns a
/// missing GPU into a failure).
#[allow(dead_code)] // not every test file that shares this module uses it
pub fn gpu() -> Option<Box<dyn engine::Backend>> {
    match engine::Device::Cuda(0).open() {
        Ok(b) => {
            eprintln!("GPU: {} / {}", b.info().device, b.info().driver);
            Some(b)
        }
        Err(e) => {
            if std::env::var("TWIN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("TWIN_REQUIRE_GPU=1 but the CUDA backend did not open: {e}");
            }
            eprintln!("SKIPPED CUDA test: no usable GPU: {e}");
            None
        }
    }
}

/// One op of every calibration kind, at tiny shapes for the CPU or at shapes worth
/// timing on a GPU (`gpu`); gathers at the placements of that device.
#[allow(dead_code)]
pub fn calibration_ops(gpu: bool) -> Vec<engine::OpSpec> {
    use engine::op::*;
    use kernels::{AttnModeKind, WeightDtype};
    let size = |cpu: usize, gpu_size: usize| if gpu { gpu_size } else { cpu };
    let gather = |placement, table_bytes: u64, rows| {
        OpSpec::Gather(GatherShape {
            placement,
            table_bytes,
            row_bytes: 256,
            rows,
        })
    };
    let mut ops = vec![
        OpSpec::MoeDecode(MoeShape {
            dtype: if gpu {
                WeightDtype::Fp8
            } else {
                WeightDtype::Int4
            },
            tokens: 1,
            experts: size(2, 8),
            n_out: size(32, 2048),
            k_in: size(256, 7168),
        }),
        OpSpec::GroupedGemm(MoeShape {
            dtype: WeightDtype::Bf16,
            tokens: size(16, 256),
            experts: size(1, 2),
            n_out: size(16, 1024),
            k_in: size(256, 1024),
        }),
        OpSpec::Attention(if gpu {
            AttnShape::decode(AttnModeKind::Sparse(2048), 4, 16, 512, 32768, 64)
        } else {
            AttnShape::decode(AttnModeKind::Window(16), 1, 2, 64, 64, 16)
        }),
        OpSpec::Indexer(IndexerShape {
            batch: size(1, 2),
            heads: size(2, 64),
            dim: size(64, 128),
            positions: size(100, 32768),
            topk: size(8, 2048),
        }),
        OpSpec::AllToAll(CopyShape {
            bytes: size(4096, 1 << 24) as u64,
            peers: 1,
        }),
        OpSpec::StreamRead(StreamShape {
            bytes: size(1 << 16, 1 << 28) as u64,
        }),
        OpSpec::Gemm(GemmShape {
            m: size(8, 1024),
            n: size(8, 1024),
            k: size(8, 1024),
        }),
    ];
    if gpu {
        ops.push(gather(GatherPlacement::Device, 1 << 28, 65536));
        ops.push(gather(GatherPlacement::Mapped, 1 << 26, 4096));
    } else {
        ops.push(gather(GatherPlacement::Host2m, 4 << 20, 64));
    }
    ops
}
