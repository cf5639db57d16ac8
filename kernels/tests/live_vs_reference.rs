//! The live model's CPU twins against their naive references on seeded random inputs.

use kernels::check::{close, topk_valid};
use kernels::cpu::live as cpu;
use kernels::live::{quantize_fp8, Group, IndexerPagedArgs, Weights};
use kernels::reference::live as reference;
use kernels::{dtype::fp8_e4m3_to_f32, WeightDtype};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn rand_vec(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

#[test]
fn grouped_linear_matches_reference_for_every_dtype() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (i, dtype) in WeightDtype::ALL.into_iter().enumerate() {
        let w = Weights::random(dtype, 5, 37, 512, 0.05, 10 + i as u64);
        // Uneven groups, one empty, one row left out of every group (stays as it was).
        let groups = [
            Group {
                expert: 3,
                start: 0,
                rows: 70,
            },
            Group {
                expert: 0,
                start: 70,
                rows: 0,
            },
            Group {
                expert: 4,
                start: 70,
                rows: 9,
            },
            Group {
                expert: 3,
                start: 80,
                rows: 2,
            },
        ];
        let x = rand_vec(&mut rng, 82 * 512);
        let init: Vec<f32> = (0..82 * 37).map(|v| v as f32).collect();
        let mut y = init.clone();
        cpu::linear(&w.as_ref(), &groups, &x, &mut y).unwrap();
        let want = reference::linear(&w.as_ref(), &groups, &x, &init);
        close(&y, &want, 1e-4, 1e-4).unwrap_or_else(|e| panic!("{dtype:?}: {e}"));
        assert_eq!(y[79 * 37], init[79 * 37], "row 79 is in no group");
    }
}

#[test]
fn linear_rejects_bad_groups_and_shapes() {
    let w = Weights::random(WeightDtype::Bf16, 2, 8, 256, 0.1, 1);
    let x = vec![0f32; 4 * 256];
    let mut y = vec![0f32; 4 * 8];
    let bad =
        |g: &[Group], y: &mut [f32]| cpu::linear(&w.as_ref(), g, &x, y).unwrap_err().to_string();
    assert!(bad(
        &[Group {
            expert: 2,
            start: 0,
            rows: 1
        }],
        &mut y
    )
    .contains("outside"));
    assert!(bad(
        &[Group {
            expert: 0,
            start: 3,
            rows: 2
        }],
        &mut y
    )
    .contains("outside"));
    assert!(bad(
        &[
            Group {
                expert: 0,
                start: 0,
                rows: 2
            },
            Group {
                expert: 1,
                start: 1,
                rows: 2
            }
        ],
        &mut y
    )
    .contains("overlap"));
    assert!(bad(&[Group::dense(4)], &mut y[1..]).contains("expected"));
}

#[test]
fn norm_swiglu_gate_combine_gather_add_argmax_match_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let (rows, dim) = (13, 96);
    let x0 = rand_vec(&mut rng, rows * dim);
    let delta = rand_vec(&mut rng, rows * dim);
    let g: Vec<f32> = (0..dim).map(|_| rng.random_range(0.5f32..1.5)).collect();
    let mut x = x0.clone();
    let mut out = vec![0f32; rows * dim];
    cpu::rmsnorm(&mut x, Some(&delta), &g, &mut out, 1e-6).unwrap();
    let (wx, wout) = reference::rmsnorm(&x0, Some(&delta), &g, 1e-6);
    close(&x, &wx, 1e-6, 1e-6).unwrap();
    close(&out, &wout, 1e-5, 1e-5).unwrap();

    let gu = rand_vec(&mut rng, rows * 2 * 40);
    let mut act = vec![0f32; rows * 40];
    cpu::swiglu(&gu, &mut act, 40).unwrap();
    close(&act, &reference::swiglu(&gu, 40), 1e-6, 1e-5).unwrap();

    let (experts, k) = (24, 5);
    let mut logits = rand_vec(&mut rng, rows * experts);
    logits[3] = logits[4]; // a tie
    let mut ids = vec![0i32; rows * k];
    let mut ws = vec![0f32; rows * k];
    cpu::gate_topk(&logits, experts, k, &mut ids, &mut ws).unwrap();
    let (wids, wws) = reference::gate_topk(&logits, experts, k);
    assert_eq!(ids, wids);
    close(&ws, &wws, 1e-6, 1e-5).unwrap();
    assert!(cpu::gate_topk(&logits, experts, 0, &mut ids, &mut ws).is_err());

    let n_y = 40;
    let y = rand_vec(&mut rng, n_y * dim);
    let slots: Vec<i32> = (0..rows * k)
        .map(|i| {
            if i % 7 == 3 {
                -1
            } else {
                rng.random_range(0..n_y as i32)
            }
        })
        .collect();
    let init = rand_vec(&mut rng, rows * dim);
    let mut acc = init.clone();
    cpu::moe_combine(&y, dim, &slots, &ws, k, &mut acc).unwrap();
    close(
        &acc,
        &reference::moe_combine(&y, dim, &slots, &ws, k, &init),
        1e-5,
        1e-5,
    )
    .unwrap();

    let idx: Vec<i32> = (0..30).map(|_| rng.random_range(0..n_y as i32)).collect();
    let mut gathered = vec![0f32; 30 * dim];
    cpu::gather_rows(&y, dim, &idx, &mut gathered).unwrap();
    for (i, &s) in idx.iter().enumerate() {
        assert_eq!(
            gathered[i * dim..(i + 1) * dim],
            y[s as usize * dim..(s as usize + 1) * dim]
        );
    }
    assert!(cpu::gather_rows(&y, dim, &[n_y as i32], &mut gathered[..dim]).is_err());

    let mut a = init.clone();
    cpu::add(&mut a, &y[..rows * dim]).unwrap();
    for i in 0..rows * dim {
        assert_eq!(a[i], init[i] + y[i]);
    }

    let mut am = vec![0i32; n_y];
    let mut ties = y.clone();
    ties[5] = ties[6] + 10.0;
    ties[6] = ties[5];
    cpu::argmax(&ties, dim, &mut am).unwrap();
    assert_eq!(am, reference::argmax(&ties, dim));
    assert_eq!(am[0], 5, "ties go to the lower index");
}

#[test]
fn fp8_quantisation_is_the_nearest_code_ties_to_even() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut vals: Vec<f32> = (0..20_000)
        .map(|_| rng.random_range(-500.0f32..500.0))
        .collect();
    vals.extend((0..20_000).map(|_| rng.random_range(-0.05f32..0.05)));
    // Exact codes and midpoints between neighbours (the ties).
    for c in 0u8..0x7e {
        let (a, b) = (fp8_e4m3_to_f32(c), fp8_e4m3_to_f32(c + 1));
        vals.extend([a, -a, 0.5 * (a + b), -0.5 * (a + b)]);
    }
    vals.extend([0.0, -0.0, 448.0, 1e9, -1e9]);
    for v in vals {
        assert_eq!(quantize_fp8(v), reference::nearest_fp8(v), "{v:e}");
    }
    assert_eq!(quantize_fp8(f32::NAN), 0x7f);
}

#[test]
fn kv_write_stores_scaled_fp8_rows_in_their_slots() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let dim = 64;
    let src = rand_vec(&mut rng, 3 * dim);
    let mut cache = vec![0u8; 10 * dim];
    let mut scales = vec![0f32; 10];
    cpu::kv_write(&src, dim, &[7, 2, 9], &mut cache, &mut scales).unwrap();
    for (r, &s) in [7usize, 2, 9].iter().enumerate() {
        let row = &src[r * dim..(r + 1) * dim];
        let m = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(scales[s], m / 448.0);
        for j in 0..dim {
            let back = fp8_e4m3_to_f32(cache[s * dim + j]) * scales[s];
            assert!((back - row[j]).abs() <= 0.07 * m, "{back} vs {}", row[j]);
        }
    }
    assert!(cpu::kv_write(&src, dim, &[1, 1, 2], &mut cache, &mut scales).is_err());
    assert!(cpu::kv_write(&src, dim, &[1, 10, 2], &mut cache, &mut scales).is_err());
}

#[test]
fn paged_indexer_matches_reference_and_masks_past_the_sequence() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (rows, heads, dim, page, pages) = (4, 3, 64, 16, 12);
    let keys: Vec<u8> = (0..pages * page * dim)
        .map(|_| kernels::moderate_fp8(rng.random()))
        .collect();
    let key_scale: Vec<f32> = (0..pages * page)
        .map(|_| rng.random_range(0.5..1.5))
        .collect();
    let max_pages = 5;
    let block_table: Vec<i32> = (0..rows * max_pages)
        .map(|_| rng.random_range(0..pages as i32))
        .collect();
    let seq_lens = vec![70, 1, 33, 0];
    let q = rand_vec(&mut rng, rows * heads * dim);
    let w: Vec<f32> = (0..rows * heads)
        .map(|_| rng.random_range(0.0..1.0))
        .collect();
    let args = IndexerPagedArgs {
        rows,
        heads,
        dim,
        page_size: page,
        max_pages,
        n_pos: 72,
        q: &q,
        w: &w,
        keys: &keys,
        key_scale: &key_scale,
        block_table: &block_table,
        seq_lens: &seq_lens,
    };
    let mut got = vec![0f32; rows * 72];
    cpu::indexer_paged_scores(&args, &mut got).unwrap();
    let want = reference::indexer_paged_scores(&args);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if w.is_infinite() {
            assert_eq!(g, w, "position {i}");
        } else {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "position {i}: {g} vs {w}"
            );
        }
    }
    let sel = kernels::cpu::topk(&got, rows, 72, 8);
    topk_valid(&sel[..8], &got[..72], 1, 72, 8).unwrap();
    // Top-k over each row's own prefix: the same selection, padding left out.
    let pre = kernels::cpu::topk_prefix(&got, 72, &seq_lens, 8);
    for (r, &len) in seq_lens.iter().enumerate() {
        let len = len as usize;
        let row = &pre[r * 8..(r + 1) * 8];
        topk_valid(row, &got[r * 72..r * 72 + len], 1, len, 8).unwrap();
    }
    let bad = IndexerPagedArgs { n_pos: 50, ..args };
    assert!(cpu::indexer_paged_scores(&bad, &mut got[..rows * 50]).is_err());
}
