//! A layer's FFN half: dense, or routed experts (local, or exchanged with the other
//! ranks of the DEP group) plus the shared expert.

use super::*;

/// The routed-expert half of an MoE layer on this rank: `n` rows of `h2` (absent when
/// the rank has no rows), their `k` expert choices `ids` (`[n][k]`), and the experts'
/// weights with their FFN width.
#[derive(Clone, Copy)]
struct Routed<'a> {
    h2: Option<Buf>,
    ids: &'a [i32],
    n: usize,
    k: usize,
    w13: DevWeights,
    w2: DevWeights,
    ffn: usize,
}

impl Executor {
    /// FFN of layer `l` over `n` rows of `h2` (absent when this rank has no rows; it
    /// still takes part in the exchanges). Returns the FFN output `[n][hidden]`.
    pub(super) fn ffn(
        &mut self,
        l: usize,
        h2: Option<Buf>,
        n: usize,
        ex: &mut dyn Exchange,
    ) -> Result<Buf> {
        let h = self.cfg.hidden;
        let (gate, w13, w2, shared) = match &self.layers[l].ffn {
            FfnW::Dense { w13, w2 } => {
                let (w13, w2) = (*w13, *w2);
                let Some(x) = h2 else { return self.alloc(0) };
                return self.swiglu_ffn((w13, w2), x, n, self.cfg.dense_ffn);
            }
            FfnW::Moe {
                gate,
                w13,
                w2,
                shared,
            } => (*gate, *w13, *w2, *shared),
        };
        let m = self.cfg.moe.ok_or_else(|| bad("MoE layer without [moe]"))?;
        let k = m.top_k;
        let (ids_h, gw) = match h2 {
            Some(x) => {
                let (ids_h, gw) = self.route(gate, x, n, m.experts, k)?;
                (ids_h, Some(gw))
            }
            None => (Vec::new(), None),
        };
        let routed = Routed {
            h2,
            ids: &ids_h,
            n,
            k,
            w13,
            w2,
            ffn: m.expert_ffn,
        };
        let (yr, slots) = if self.ranks == 1 {
            self.experts_local(&routed)?
        } else {
            self.experts_exchanged(&routed, ex)?
        };
        let Some(x) = h2 else {
            self.dev.free(yr);
            return self.alloc(0);
        };
        let out = match shared {
            Some((s13, s2)) => self.swiglu_ffn((s13, s2), x, n, m.shared_ffn)?,
            None => {
                let y = self.alloc(n * h)?;
                self.dev.write_f32(y, 0, &vec![0.0; n * h])?;
                y
            }
        };
        let sb = self.dev.upload_i32(&slots)?;
        let gw = gw.expect("gate weights exist with rows");
        self.dev.moe_combine(yr, h, sb, gw, k, out)?;
        rec!(self, Call::moe_combine(k, h, n as u64));
        self.free(&[sb, gw, yr]);
        Ok(out)
    }

    /// A gated FFN `w2 . swiglu(w13 . x)` over `n` rows of `x`, of width `ffn`.
    fn swiglu_ffn(
        &mut self,
        (w13, w2): (DevWeights, DevWeights),
        x: Buf,
        n: usize,
        ffn: usize,
    ) -> Result<Buf> {
        let gu = self.dense(w13, x, n)?;
        let act = self.swiglu(gu, n, ffn)?;
        let y = self.dense(w2, act, n)?;
        self.free(&[gu, act]);
        Ok(y)
    }

    /// The router over `n` rows of `x`: each row's `k` expert ids (read back to the
    /// host, `[n][k]`) and their gate weights on the device.
    fn route(
        &mut self,
        gate: DevWeights,
        x: Buf,
        n: usize,
        experts: usize,
        k: usize,
    ) -> Result<(Vec<i32>, Buf)> {
        let logits = self.dense(gate, x, n)?;
        let ids = self.dev.alloc(Dt::I32, n * k)?;
        let gw = self.alloc(n * k)?;
        self.dev.gate_topk(logits, experts, k, ids, gw)?;
        rec!(self, Call::gate_topk(experts, k, n as u64));
        let ids_h = self.dev.read_i32(ids, 0, n * k)?;
        self.free(&[logits, ids]);
        Ok((ids_h, gw))
    }

    /// One rank holds every expert: permute rows by expert on the device, run each
    /// touched expert on its rows; returns the outputs (expert order) and the slot of
    /// each (row, choice) among them.
    fn experts_local(&mut self, r: &Routed) -> Result<(Buf, Vec<i32>)> {
        let Some(x) = r.h2 else {
            return Ok((self.alloc(0)?, Vec::new()));
        };
        let (order, groups) = group_by_expert(r.ids, r.w13.experts);
        // order[i] = (row, choice) entry placed i-th; gather its row.
        let perm: Vec<i32> = order.iter().map(|&e| (e / r.k) as i32).collect();
        let xp = self.gather(x, self.cfg.hidden, &perm)?;
        let rows = r.n * r.k;
        let gu = self.linear(r.w13, &groups, xp, rows)?;
        let act = self.swiglu(gu, rows, r.ffn)?;
        let yp = self.linear(r.w2, &groups, act, rows)?;
        let mut slots = vec![0i32; rows];
        for (i, &e) in order.iter().enumerate() {
            slots[e] = i as i32;
        }
        self.free(&[xp, gu, act]);
        Ok((yp, slots))
    }

    /// Experts spread over the group: dispatch each (row, choice) to the rank holding
    /// its expert, run the local experts, combine back. Returns outputs in (row,
    /// choice) order and their slots (an empty buffer when this rank has no rows).
    fn experts_exchanged(&mut self, r: &Routed, ex: &mut dyn Exchange) -> Result<(Buf, Vec<i32>)> {
        let Routed {
            h2,
            ids,
            n,
            k,
            w13,
            w2,
            ffn,
        } = *r;
        let h = self.cfg.hidden;
        let local = w13.experts;
        let xh = match h2 {
            Some(x) => self.dev.read_f32(x, 0, n * h)?,
            None => Vec::new(),
        };
        let send = dispatch(ids, &xh, (k, h, local), self.ranks);
        let sent: usize = send.iter().map(|v| v.len()).sum();
        let recv = ex.all_to_all(send)?;
        let got: usize = recv.iter().map(|v| v.len()).sum();
        rec!(self, Call::copy(4 * (sent + got) as u64));
        let back = self.serve_received(&recv, (w13, w2, ffn))?;
        let sent: usize = back.iter().map(|v| v.len()).sum();
        let mine = ex.all_to_all(back)?;
        let got: usize = mine.iter().map(|v| v.len()).sum();
        rec!(self, Call::copy(4 * (sent + got) as u64));
        let yr = reassemble(ids, &mine, (n, k, h, local), self.ranks);
        let slots = (0..(n * k) as i32).collect();
        if yr.is_empty() {
            return Ok((self.alloc(0)?, slots));
        }
        Ok((self.dev.upload_f32(&yr)?, slots))
    }

    /// Runs this rank's experts over the records received from each rank (grouped by
    /// expert) and returns each source's results in its record order.
    fn serve_received(
        &mut self,
        recv: &[Vec<f32>],
        (w13, w2, ffn): (DevWeights, DevWeights, usize),
    ) -> Result<Vec<Vec<f32>>> {
        let h = self.cfg.hidden;
        let local = w13.experts;
        // Local experts over everything received, grouped by expert.
        let mut ids_in = Vec::new();
        let mut src_of = Vec::new();
        for (s, v) in recv.iter().enumerate() {
            for (i, rec) in v.chunks_exact(h + 1).enumerate() {
                ids_in.push(rec[0] as i32);
                src_of.push((s, i));
            }
        }
        let m = ids_in.len();
        let mut back = vec![Vec::new(); self.ranks];
        if m > 0 {
            let (order, groups) = group_by_expert(&ids_in, local);
            let mut xp = Vec::with_capacity(m * h);
            for &e in &order {
                let (s, i) = src_of[e];
                xp.extend_from_slice(&recv[s][i * (h + 1) + 1..(i + 1) * (h + 1)]);
            }
            let xb = self.dev.upload_f32(&xp)?;
            let gu = self.linear(w13, &groups, xb, m)?;
            let act = self.swiglu(gu, m, ffn)?;
            let yb = self.linear(w2, &groups, act, m)?;
            let y = self.dev.read_f32(yb, 0, m * h)?;
            self.free(&[xb, gu, act, yb]);
            // Results back to each source in its record order.
            let mut pos = vec![0usize; m];
            for (i, &e) in order.iter().enumerate() {
                pos[e] = i;
            }
            for (e, &(s, _)) in src_of.iter().enumerate() {
                back[s].extend_from_slice(&y[pos[e] * h..(pos[e] + 1) * h]);
            }
        }
        Ok(back)
    }
}

/// Dispatch: per destination rank, `[local expert id, row...]` records in entry order,
/// each row taken from the host copy `xh` of the `[n][h]` input.
fn dispatch(
    ids: &[i32],
    xh: &[f32],
    (k, h, local): (usize, usize, usize),
    ranks: usize,
) -> Vec<Vec<f32>> {
    let mut send = vec![Vec::new(); ranks];
    for (e, &id) in ids.iter().enumerate() {
        let d = id as usize / local;
        send[d].push((id as usize % local) as f32);
        send[d].extend_from_slice(&xh[(e / k) * h..(e / k + 1) * h]);
    }
    send
}

/// Reassembles the experts' answers `mine` in (row, choice) order: each destination
/// answered in send order.
fn reassemble(
    ids: &[i32],
    mine: &[Vec<f32>],
    (n, k, h, local): (usize, usize, usize, usize),
    ranks: usize,
) -> Vec<f32> {
    let mut next = vec![0usize; ranks];
    let mut yr = Vec::with_capacity(n * k * h);
    for &id in ids {
        let d = id as usize / local;
        let i = next[d];
        next[d] += 1;
        yr.extend_from_slice(&mine[d][i * h..(i + 1) * h]);
    }
    yr
}

/// Counting sort of (row, choice) entries by expert: the entry order (indices into
/// `ids`) and one group per touched expert over consecutive positions.
pub fn group_by_expert(ids: &[i32], experts: usize) -> (Vec<usize>, Vec<Group>) {
    let mut count = vec![0u32; experts];
    for &e in ids {
        count[e as usize] += 1;
    }
    let mut start = vec![0u32; experts + 1];
    for e in 0..experts {
        start[e + 1] = start[e] + count[e];
    }
    let mut next = start.clone();
    let mut order = vec![0usize; ids.len()];
    for (i, &e) in ids.iter().enumerate() {
        order[next[e as usize] as usize] = i;
        next[e as usize] += 1;
    }
    let groups = (0..experts)
        .filter(|&e| count[e] > 0)
        .map(|e| Group {
            expert: e as u32,
            start: start[e],
            rows: count[e],
        })
        .collect();
    (order, groups)
}
