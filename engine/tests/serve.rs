//! The serving executor on the CPU device: chunking, paging, DEP and KV hand-over do not
//! change what the model computes; MTP drafts and acceptance shape the outputs.

use engine::serve::{CpuDevice, Executor, Seq, SeqOut, Shard, Solo, ThreadExchange};
mod common;
use common::tiny;

fn exec(rank: usize, ranks: usize) -> Executor {
    Executor::new(
        Box::new(CpuDevice::new()),
        tiny(),
        Shard {
            seed: 7,
            rank,
            ranks,
            pages: 64,
        },
    )
    .unwrap()
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + 11) % 512).collect()
}

/// Prefills `p[..len-1]` in chunks, then one decode step from the last token.
fn run(
    e: &mut Executor,
    p: &[u32],
    pages: &[u32],
    chunks: &[usize],
    drafts: usize,
    accept: usize,
) -> Vec<u32> {
    let mut start = 0;
    for &c in chunks {
        let s = Seq {
            tokens: p[start..start + c].to_vec(),
            start,
            pages: pages.to_vec(),
            accept: None,
        };
        assert!(e.forward(&[s], 0, &mut Solo).unwrap().is_empty());
        start += c;
    }
    assert_eq!(start, p.len() - 1);
    let mut tokens = vec![p[p.len() - 1]];
    tokens.extend((0..drafts as u32).map(|i| (i * 5 + 3) % 512));
    let s = Seq {
        tokens,
        start,
        pages: pages.to_vec(),
        accept: Some(accept),
    };
    let out = e.forward(&[s], drafts, &mut Solo).unwrap();
    let mut v = out[0].emitted.clone();
    v.extend(&out[0].drafts);
    v
}

#[test]
fn chunking_and_page_order_do_not_change_the_output() {
    let p = prompt(41);
    let ident: Vec<u32> = (0..3).collect();
    let shuffled = vec![17, 3, 40];
    let whole = run(&mut exec(0, 1), &p, &ident, &[40], 1, 1);
    assert_eq!(
        whole.len(),
        3,
        "1 accepted draft + the target token + 1 new draft"
    );
    assert_eq!(
        run(&mut exec(0, 1), &p, &shuffled, &[7, 16, 17], 1, 1),
        whole
    );
    assert_eq!(run(&mut exec(0, 1), &p, &ident, &[1, 39], 1, 1), whole);
}

#[test]
fn accepted_drafts_and_new_drafts_have_the_declared_counts() {
    let p = prompt(20);
    let pages: Vec<u32> = (0..2).collect();
    for (drafts, accept) in [(0, 0), (2, 0), (2, 2), (3, 1)] {
        let mut e = exec(0, 1);
        let out = run(&mut e, &p, &pages, &[19], drafts, accept);
        assert_eq!(
            out.len(),
            accept + 1 + drafts,
            "{drafts} drafts, {accept} accepted"
        );
        if accept > 0 {
            assert_eq!(out[0], 3, "the first accepted token is the first draft");
        }
    }
}

/// Runs one forward pass (one draft) on each rank's executor in its own thread, each
/// with its own sequences and exchange, and returns every rank's outputs.
fn step(seqs: Vec<Vec<Seq>>, execs: &mut [Executor], exs: Vec<ThreadExchange>) -> Vec<Vec<SeqOut>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = execs
            .iter_mut()
            .zip(exs)
            .zip(seqs)
            .map(|((e, mut x), q)| s.spawn(move || e.forward(&q, 1, &mut x).unwrap()))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    })
}

/// The prefill of `p` but its last token, or the decode step from its last token (one
/// draft, accepted) when `decode`.
fn seq(p: &[u32], pages: Vec<u32>, decode: bool) -> Seq {
    if decode {
        Seq {
            tokens: vec![p[p.len() - 1], 9],
            start: p.len() - 1,
            pages,
            accept: Some(1),
        }
    } else {
        Seq {
            tokens: p[..p.len() - 1].to_vec(),
            start: 0,
            pages,
            accept: None,
        }
    }
}

#[test]
fn two_ranks_exchanging_tokens_compute_what_one_rank_does() {
    let pa = prompt(30);
    let pb: Vec<u32> = prompt(45).into_iter().rev().collect();
    // DEP2: request A on rank 0, B on rank 1.
    let mut execs = vec![exec(0, 2), exec(1, 2)];
    step(
        vec![
            vec![seq(&pa, vec![0, 1], false)],
            vec![seq(&pb, vec![0, 1, 2], false)],
        ],
        &mut execs,
        ThreadExchange::group(2),
    );
    let dep2 = step(
        vec![
            vec![seq(&pa, vec![0, 1], true)],
            vec![seq(&pb, vec![0, 1, 2], true)],
        ],
        &mut execs,
        ThreadExchange::group(2),
    );
    // DEP1: both on one rank.
    let mut one = exec(0, 1);
    one.forward(
        &[seq(&pa, vec![0, 1], false), seq(&pb, vec![2, 3, 4], false)],
        0,
        &mut Solo,
    )
    .unwrap();
    let dep1 = one
        .forward(
            &[seq(&pa, vec![0, 1], true), seq(&pb, vec![2, 3, 4], true)],
            1,
            &mut Solo,
        )
        .unwrap();
    assert_eq!(dep2[0][0], dep1[0]);
    assert_eq!(dep2[1][0], dep1[1]);
    // An idle rank still takes part in the exchanges.
    let mut execs = vec![exec(0, 2), exec(1, 2)];
    let r = step(
        vec![vec![seq(&pa, vec![0, 1], false)], vec![]],
        &mut execs,
        ThreadExchange::group(2),
    );
    assert!(r.iter().all(|o| o.is_empty()));
}

#[test]
fn kv_handed_over_decodes_like_kv_computed_in_place() {
    let p = prompt(33);
    let mut a = exec(0, 1);
    let want = run(&mut a, &p, &[0, 1, 2], &[32], 1, 0);
    let mut pre = exec(0, 1);
    pre.forward(
        &[Seq {
            tokens: p[..32].to_vec(),
            start: 0,
            pages: vec![5, 6, 7],
            accept: None,
        }],
        0,
        &mut Solo,
    )
    .unwrap();
    let bytes = pre.export_kv(&[5, 6]).unwrap();
    assert_eq!(bytes.len(), 2 * 16 * tiny().kv_bytes_per_token());
    let mut dec = exec(0, 1);
    dec.import_kv(&[0, 1], &bytes).unwrap();
    assert!(
        dec.import_kv(&[0], &bytes).is_err(),
        "size must match the pages"
    );
    let out = dec
        .forward(
            &[Seq {
                tokens: vec![p[32], 3],
                start: 32,
                pages: vec![0, 1, 2],
                accept: Some(0),
            }],
            1,
            &mut Solo,
        )
        .unwrap();
    let mut got = out[0].emitted.clone();
    got.extend(&out[0].drafts);
    assert_eq!(got, want);
}

#[test]
fn bad_configurations_and_inputs_are_errors() {
    let mut c = tiny();
    c.hidden = 200;
    c.layers[1].has_indexer = false;
    c.layers.swap(0, 1);
    let e = Executor::new(
        Box::new(CpuDevice::new()),
        c,
        Shard {
            seed: 1,
            rank: 0,
            ranks: 3,
            pages: 8,
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("hidden = 200"), "{e}");
    assert!(e.contains("no earlier layer has an indexer"), "{e}");
    assert!(e.contains("do not divide over 3 ranks"), "{e}");
    let mut x = exec(0, 1);
    let s = Seq {
        tokens: vec![1; 20],
        start: 0,
        pages: vec![0],
        accept: None,
    };
    assert!(x
        .forward(&[s], 0, &mut Solo)
        .unwrap_err()
        .to_string()
        .contains("pages"));
    let s = Seq {
        tokens: vec![600],
        start: 0,
        pages: vec![0],
        accept: None,
    };
    assert!(x
        .forward(&[s], 0, &mut Solo)
        .unwrap_err()
        .to_string()
        .contains("vocabulary"));
}
