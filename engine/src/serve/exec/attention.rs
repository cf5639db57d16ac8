//! A layer's attention half: projections, KV writes, the indexer's selection and the
//! attention kernels over the paged cache.

use super::*;

impl Executor {
    /// Attention half of layer `l`: returns the FFN input (`x` updated with the
    /// attention output as its residual).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention_block(
        &mut self,
        l: usize,
        x: Buf,
        delta: &mut Option<Buf>,
        sel: &mut Option<Buf>,
        rows: &Rows,
        lens: Buf,
        table: Buf,
        slots: Buf,
    ) -> Result<Buf> {
        let n = rows.n;
        let (heads, lat, page) = (self.cfg.heads, self.cfg.latent, self.cfg.page_size);
        let lc = self.cfg.layers[l];
        let (attn_norm, ffn_norm, wq, wkv, idx, wo) = {
            let w = &self.layers[l];
            (w.attn_norm, w.ffn_norm, w.wq, w.wkv, w.idx, w.wo)
        };
        let hn = self.norm(x, *delta, attn_norm, n)?;
        let q = self.dense(wq, hn, n)?;
        let kvv = self.dense(wkv, hn, n)?;
        let (kv, kv_scale, keys) = {
            let c = &self.cache[l];
            (c.kv, c.kv_scale, c.keys)
        };
        self.dev.kv_write(kvv, lat, slots, kv, kv_scale)?;
        self.rec(
            KvWriteShape {
                rows: n,
                dim: lat,
                slots: kv_scale.len,
            }
            .call(),
        );
        let mut tmp = vec![hn, q, kvv];
        if let (Some((wiq, wiw, wik)), Some(ix), Some((ikeys, iscale))) =
            (idx, self.cfg.indexer, keys)
        {
            let iq = self.dense(wiq, hn, n)?;
            let iw = self.dense(wiw, hn, n)?;
            let ik = self.dense(wik, hn, n)?;
            self.dev.kv_write(ik, ix.dim, slots, ikeys, iscale)?;
            self.rec(
                KvWriteShape {
                    rows: n,
                    dim: ix.dim,
                    slots: iscale.len,
                }
                .call(),
            );
            let n_pos = rows.lens.iter().copied().max().unwrap_or(1).max(1) as usize;
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
                block_table: table,
                seq_lens: lens,
                scores,
                out,
            })?;
            let positions: usize = rows.lens.iter().map(|&l| l as usize).sum();
            self.rec(Call {
                op: "indexer_paged",
                dtype: "",
                key: crate::op::live::indexer_key(ix.heads, ix.dim, ix.topk, page),
                vars: vec![("rows", n as u64), ("positions", positions as u64)],
            });
            if let Some(old) = sel.replace(out) {
                self.dev.free(old);
            }
            tmp.extend([iq, iw, ik, scores]);
        }
        let o = self.alloc(n * heads * lat)?;
        let main = match lc.attention {
            AttnKind::Dense => AttnModeKind::Dense,
            AttnKind::Window => AttnModeKind::Window(self.cfg.window),
            AttnKind::Sparse => AttnModeKind::Sparse(self.cfg.indexer.map_or(1, |i| i.topk)),
        };
        self.attend(main, *sel, q, o, rows, lens, table, l)?;
        if lc.window_branch && lc.attention != AttnKind::Window {
            let o2 = self.alloc(n * heads * lat)?;
            self.attend(
                AttnModeKind::Window(self.cfg.window),
                None,
                q,
                o2,
                rows,
                lens,
                table,
                l,
            )?;
            self.dev.add(o, o2)?;
            self.rec(
                AddShape {
                    rows: n,
                    dim: heads * lat,
                }
                .call(),
            );
            tmp.push(o2);
        }
        let a = self.dense(wo, o, n)?;
        let h2 = self.norm(x, Some(a), ffn_norm, n)?;
        tmp.extend([o, a]);
        self.free(&tmp);
        if let Some(d) = delta.take() {
            self.dev.free(d);
        }
        Ok(h2)
    }

    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        mode: AttnModeKind,
        sel: Option<Buf>,
        q: Buf,
        out: Buf,
        rows: &Rows,
        lens: Buf,
        table: Buf,
        l: usize,
    ) -> Result<()> {
        let s = match (mode, sel) {
            (AttnModeKind::Dense, _) => AttnSel::Dense,
            (AttnModeKind::Window(w), _) => AttnSel::Window(w),
            (AttnModeKind::Sparse(k), Some(indices)) => AttnSel::Sparse { topk: k, indices },
            (AttnModeKind::Sparse(_), None) => {
                return Err(bad("sparse attention before any indexer"))
            }
        };
        let (heads, lat, page) = (self.cfg.heads, self.cfg.latent, self.cfg.page_size);
        let c = &self.cache[l];
        let call = AttnCall {
            rows: rows.n,
            heads,
            dim: lat,
            page_size: page,
            max_pages: rows.max_pages,
            q,
            kv: c.kv,
            kv_scale: c.kv_scale,
            block_table: table,
            seq_lens: lens,
            softmax_scale: 1.0 / (lat as f32).sqrt(),
            sel: s,
            out,
        };
        self.dev.attention(&call)?;
        let positions: usize = rows
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
        self.rec(attention_call(mode, heads, lat, page, rows.n, positions));
        Ok(())
    }
}
