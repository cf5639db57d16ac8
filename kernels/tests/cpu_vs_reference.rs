//! Every CPU twin against its naive reference on seeded random inputs.

use kernels::check::{close, topk_valid};
use kernels::{
    cpu, reference, AttnModeKind, AttnProblem, GatherProblem, IndexerProblem, MoeProblem,
    WeightDtype,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn moe_all_dtypes_match_reference() {
    for (i, dtype) in WeightDtype::ALL.into_iter().enumerate() {
        for &(tokens, touched) in &[(1usize, 3usize), (5, 2), (9, 1)] {
            let p = MoeProblem::random(dtype, 4, touched, tokens, 24, 512, 100 + i as u64);
            let got = cpu::moe(&p).unwrap();
            let want = reference::moe(&p);
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(scale > 0.0);
            close(&got, &want, 1e-5 * scale, 1e-4)
                .unwrap_or_else(|e| panic!("{dtype:?} t={tokens}: {e}"));
        }
    }
}

#[test]
fn moe_rejects_bad_shapes() {
    let mut p = MoeProblem::random(WeightDtype::Fp8, 2, 1, 1, 8, 256, 1);
    p.k_in = 100;
    assert!(cpu::moe(&p).is_err());
    let mut p = MoeProblem::random(WeightDtype::Fp8, 2, 1, 1, 8, 256, 1);
    p.expert_ids[0] = 7;
    assert!(cpu::moe(&p)
        .unwrap_err()
        .to_string()
        .contains("expert id 7"));
}

#[test]
fn attention_modes_match_reference() {
    let modes = [
        AttnModeKind::Dense,
        AttnModeKind::Sparse(40),
        AttnModeKind::Window(37),
    ];
    for (i, mode) in modes.into_iter().enumerate() {
        for &(dim, page) in &[(64usize, 16usize), (512, 64)] {
            let p = AttnProblem::random(2, 11, dim, 150, page, mode, 7 + i as u64);
            let got = cpu::attention(&p).unwrap();
            let want = reference::attention(&p);
            close(&got, &want, 1e-4, 1e-3).unwrap_or_else(|e| panic!("{mode:?} dim={dim}: {e}"));
        }
    }
}

#[test]
fn attention_empty_rows_give_zeros_and_bad_dim_is_rejected() {
    let mut p = AttnProblem::random(2, 3, 64, 20, 8, AttnModeKind::Dense, 3);
    p.seq_lens[1] = 0;
    let got = cpu::attention(&p).unwrap();
    assert!(got[3 * 64..].iter().all(|&v| v == 0.0));
    close(&got, &reference::attention(&p), 1e-4, 1e-3).unwrap();
    p.dim = 48;
    assert!(cpu::attention(&p).is_err());
}

#[test]
fn indexer_scores_and_topk_match_reference() {
    let p = IndexerProblem::random(2, 8, 128, 700, 64, 11);
    let got = cpu::indexer(&p).unwrap();
    let want = reference::indexer_scores(&p);
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    close(&got.scores, &want, 1e-5 * scale, 1e-4).unwrap();
    topk_valid(&got.topk, &got.scores, p.batch, p.n_pos, p.topk).unwrap();
    // The twin's top-k agrees with the sort-based reference on the same scores.
    let r = reference::topk(&got.scores, p.batch, p.n_pos, p.topk);
    topk_valid(&r, &got.scores, p.batch, p.n_pos, p.topk).unwrap();
    // Short rows are padded with -1; ties are handled.
    let short = cpu::topk(&[1.0, 3.0, 2.0], 1, 3, 5);
    assert_eq!(short.iter().filter(|&&i| i == -1).count(), 2);
    let ties = vec![1.0f32; 50];
    topk_valid(&cpu::topk(&ties, 1, 50, 10), &ties, 1, 50, 10).unwrap();
}

#[test]
fn topk_valid_detects_wrong_selection() {
    let scores = [0.5f32, 2.0, 1.0, 3.0];
    assert!(topk_valid(&[3, 1], &scores, 1, 4, 2).is_ok());
    assert!(topk_valid(&[3, 2], &scores, 1, 4, 2).is_err());
    assert!(topk_valid(&[3, 3], &scores, 1, 4, 2).is_err());
}

#[test]
fn gather_copy_stream_read_and_gemm_match_reference() {
    let p = GatherProblem::random(1000, 256, 3000, 5);
    assert_eq!(
        cpu::gather(&p).unwrap(),
        reference::gather(&p.table, 256, &p.indices)
    );
    let mut bad = p.clone();
    bad.indices[0] = 1000;
    assert!(cpu::gather(&bad).is_err());

    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut src = vec![0u8; (3 << 20) + 13];
    rng.fill(&mut src[..]);
    let mut dst = vec![0u8; src.len()];
    cpu::copy(&src, &mut dst).unwrap();
    assert!(src == dst);
    assert!(cpu::copy(&src, &mut dst[1..]).is_err());
    assert_eq!(cpu::stream_read(&src), reference::stream_read(&src));

    let (m, n, k) = (9, 33, 300);
    let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    close(
        &cpu::gemm(&a, &b, m, n, k).unwrap(),
        &reference::gemm(&a, &b, m, n, k),
        1e-4,
        1e-4,
    )
    .unwrap();
}

#[test]
fn gemm_tiles_and_edges_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    for (m, n, k) in [
        (8, 32, 17),
        (4, 16, 1),
        (5, 47, 64),
        (3, 7, 9),
        (12, 48, 100),
    ] {
        let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
        close(
            &cpu::gemm(&a, &b, m, n, k).unwrap(),
            &reference::gemm(&a, &b, m, n, k),
            1e-4,
            1e-4,
        )
        .unwrap_or_else(|e| panic!("{m}x{n}x{k}: {e}"));
    }
}
