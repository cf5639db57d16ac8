//! A layer's attention half: projections, KV writes, the indexer's selection and the
//! attention kernels over the paged cache.

use super::*;

/// One layer's attention inputs: its index, the pass's rows and their device tables,
/// and the queries.
struct AttnIn<'a> {
    l: usize,
    rows: &'a Rows,
    t: RowTables,
    q: Buf,
}

impl Executor {
    /// Attention half of layer `l`: returns the FFN input (`x` updated with the
    /// attention output as its residual); takes the carried delta, and replaces the
    /// carried selection when the layer runs an indexer.
    pub(super) fn attention_block(
        &mut self,
        l: usize,
        x: Buf,
        carry: &mut Carry,
        rows: &Rows,
        t: RowTables,
    ) -> Result<Buf> {
        let n = rows.n;
        let lat = self.cfg.latent;
        let (attn_norm, ffn_norm, wq, wkv, wo) = {
            let w = &self.layers[l];
            (w.attn_norm, w.ffn_norm, w.wq, w.wkv, w.wo)
        };
        let hn = self.norm(x, carry.delta, attn_norm, n)?;
        let q = self.dense(wq, hn, n)?;
        let kvv = self.dense(wkv, hn, n)?;
        let (kv, kv_scale) = (self.cache[l].kv, self.cache[l].kv_scale);
        self.dev.kv_write(kvv, lat, t.slots, kv, kv_scale)?;
        rec!(self, Call::kv_write(lat, n as u64));
        let mut tmp = vec![hn, q, kvv];
        if let Some(sel) = self.select(l, hn, rows, t, &mut tmp)? {
            if let Some(old) = carry.sel.replace(sel) {
                self.dev.free(old);
            }
        }
        let o = self.attend_layer(&AttnIn { l, rows, t, q }, carry.sel, &mut tmp)?;
        let a = self.dense(wo, o, n)?;
        let h2 = self.norm(x, Some(a), ffn_norm, n)?;
        tmp.extend([o, a]);
        self.free(&tmp);
        if let Some(d) = carry.delta.take() {
            self.dev.free(d);
        }
        Ok(h2)
    }

    /// Layer `l`'s indexer, when it runs one: its projections of `hn`, its key write
    /// and the top-k selection of every row (returned; temporaries pushed on `tmp`).
    fn select(
        &mut self,
        l: usize,
        hn: Buf,
        rows: &Rows,
        t: RowTables,
        tmp: &mut Vec<Buf>,
    ) -> Result<Option<Buf>> {
        let (Some((wiq, wiw, wik)), Some(ix), Some((ikeys, iscale))) =
            (self.layers[l].idx, self.cfg.indexer, self.cache[l].keys)
        else {
            return Ok(None);
        };
        let n = rows.n;
        let page = self.cfg.page_size;
        let iq = self.dense(wiq, hn, n)?;
        let iw = self.dense(wiw, hn, n)?;
        let ik = self.dense(wik, hn, n)?;
        self.dev.kv_write(ik, ix.dim, t.slots, ikeys, iscale)?;
        rec!(self, Call::kv_write(ix.dim, n as u64));
        let n_pos = rows.longest;
        let scores = self.alloc(n * n_pos)?;
        let out = self.dev.alloc(Dt::I32, n * ix.topk)?;
        self.dev.indexer(&IndexerCall {
            rows: n,
            heads: ix.heads,
            dim: ix.dim,
            page_size: page,
            max_pages: rows.max_pages,
            n_pos,
            topk: ix.topk,
            q: iq,
            w: iw,
            keys: ikeys,
            key_scale: iscale,
            block_table: t.table,
            seq_lens: t.lens,
            scores,
            out,
        })?;
        let positions: usize = rows.lens.iter().map(|&l| l as usize).sum();
        rec!(
            self,
            Call::indexer_paged(ix, page, n as u64, positions as u64)
        );
        tmp.extend([iq, iw, ik, scores]);
        Ok(Some(out))
    }

    /// The layer's attention in its mode, plus its window branch when it declares one
    /// (added to the main output); returns the output (the branch's pushed on `tmp`).
    fn attend_layer(&mut self, a: &AttnIn, sel: Option<Buf>, tmp: &mut Vec<Buf>) -> Result<Buf> {
        let (n, hl) = (a.rows.n, self.cfg.heads * self.cfg.latent);
        let lc = self.cfg.layers[a.l];
        let o = self.alloc(n * hl)?;
        let main = match lc.attention {
            AttnKind::Dense => AttnModeKind::Dense,
            AttnKind::Window => AttnModeKind::Window(self.cfg.window),
            AttnKind::Sparse => AttnModeKind::Sparse(self.cfg.indexer.map_or(1, |i| i.topk)),
        };
        self.attend(a, main, sel, o)?;
        if lc.window_branch && lc.attention != AttnKind::Window {
            let o2 = self.alloc(n * hl)?;
            self.attend(a, AttnModeKind::Window(self.cfg.window), None, o2)?;
            self.dev.add(o, o2)?;
            rec!(self, Call::add(hl, n as u64));
            tmp.push(o2);
        }
        Ok(o)
    }

    fn attend(&mut self, a: &AttnIn, mode: AttnModeKind, sel: Option<Buf>, out: Buf) -> Result<()> {
        let s = match (mode, sel) {
            (AttnModeKind::Dense, _) => AttnSel::Dense,
            (AttnModeKind::Window(w), _) => AttnSel::Window(w),
            (AttnModeKind::Sparse(k), Some(indices)) => AttnSel::Sparse { topk: k, indices },
            (AttnModeKind::Sparse(_), None) => {
                return Err(bad("sparse attention before any indexer"))
            }
        };
        let (heads, lat, page) = (self.cfg.heads, self.cfg.latent, self.cfg.page_size);
        let c = &self.cache[a.l];
        let call = AttnCall {
            rows: a.rows.n,
            heads,
            dim: lat,
            page_size: page,
            max_pages: a.rows.max_pages,
            q: a.q,
            kv: c.kv,
            kv_scale: c.kv_scale,
            block_table: a.t.table,
            seq_lens: a.t.lens,
            longest: a.rows.longest,
            softmax_scale: 1.0 / (lat as f32).sqrt(),
            sel: s,
            out,
        };
        self.dev.attention(&call)?;
        let positions: usize = a
            .rows
            .lens
            .iter()
            .map(|&len| {
                let len = len as usize;
                match mode {
                    AttnModeKind::Dense => len,
                    AttnModeKind::Sparse(k) => k.min(len),
                    AttnModeKind::Window(w) => w.min(len),
                }
            })
            .sum();
        let key = attn_key(mode, heads, lat, page);
        rec!(
            self,
            Call::attention(key, a.rows.n as u64, positions as u64)
        );
        Ok(())
    }
}
