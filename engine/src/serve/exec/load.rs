//! A rank's weights and KV cache, uploaded to its device when the executor is built.

use super::*;

/// Uploads the weights of one rank: seeded from `seed`, its shard of the routed experts.
pub(super) struct Loader<'a> {
    pub cfg: &'a LiveModel,
    pub seed: u64,
    pub rank: usize,
    pub ranks: usize,
}

impl Loader<'_> {
    pub fn linear(&self, d: &mut dyn ServeDevice, w: LinearSpec) -> Result<DevWeights> {
        upload_linear(d, self.cfg, self.seed, &w)
    }

    /// Layer `l`'s weights: indexer projections, FFN, norms and attention projections.
    pub fn layer(&self, d: &mut dyn ServeDevice, l: usize) -> Result<LayerW> {
        let (cfg, h) = (self.cfg, self.cfg.hidden);
        let lc = cfg.layers[l];
        let lin =
            |d: &mut dyn ServeDevice, name, n, k| self.linear(d, LinearSpec::dense(name, l, n, k));
        let idx = match (lc.has_indexer, cfg.indexer) {
            (true, Some(ix)) => Some((
                lin(d, "idx_q", ix.heads * ix.dim, h)?,
                lin(d, "idx_w", ix.heads, h)?,
                lin(d, "idx_k", ix.dim, h)?,
            )),
            _ => None,
        };
        let ffn = self.ffn(d, l)?;
        Ok(LayerW {
            attn_norm: upload_ones(d, h)?,
            ffn_norm: upload_ones(d, h)?,
            wq: lin(d, "wq", cfg.heads * cfg.latent, h)?,
            wkv: lin(d, "wkv", cfg.latent, h)?,
            idx,
            wo: lin(d, "wo", h, cfg.heads * cfg.latent)?,
            ffn,
        })
    }

    /// Layer `l`'s FFN: the gate, this rank's experts and the shared experts, or a
    /// dense SwiGLU.
    fn ffn(&self, d: &mut dyn ServeDevice, l: usize) -> Result<FfnW> {
        let (cfg, h) = (self.cfg, self.cfg.hidden);
        let lin =
            |d: &mut dyn ServeDevice, name, n, k| self.linear(d, LinearSpec::dense(name, l, n, k));
        let (true, Some(m)) = (cfg.layers[l].moe, cfg.moe) else {
            return Ok(FfnW::Dense {
                w13: lin(d, "w13", 2 * cfg.dense_ffn, h)?,
                w2: lin(d, "w2", h, cfg.dense_ffn)?,
            });
        };
        let local = cfg.local_experts(self.ranks);
        let shard = self.rank * local..(self.rank + 1) * local;
        let experts = |name, n, k| LinearSpec {
            name,
            layer: l,
            experts: shard.clone(),
            n,
            k,
        };
        Ok(FfnW::Moe {
            gate: lin(d, "gate", m.experts, h)?,
            w13: self.linear(d, experts("w13", 2 * m.expert_ffn, h))?,
            w2: self.linear(d, experts("w2", h, m.expert_ffn))?,
            shared: if m.shared_ffn > 0 {
                Some((
                    lin(d, "shared_w13", 2 * m.shared_ffn, h)?,
                    lin(d, "shared_w2", h, m.shared_ffn)?,
                ))
            } else {
                None
            },
        })
    }

    /// The MTP head's weights (none without a draft head).
    pub fn mtp(&self, d: &mut dyn ServeDevice) -> Result<Option<MtpW>> {
        let (cfg, h) = (self.cfg, self.cfg.hidden);
        if cfg.mtp_ffn == 0 {
            return Ok(None);
        }
        let lin = |d: &mut dyn ServeDevice, name, n, k| {
            self.linear(d, LinearSpec::dense(name, usize::MAX, n, k))
        };
        Ok(Some(MtpW {
            norm_h: upload_ones(d, h)?,
            norm_e: upload_ones(d, h)?,
            proj: lin(d, "mtp_proj", h, h)?,
            ffn_norm: upload_ones(d, h)?,
            w13: lin(d, "mtp_w13", 2 * cfg.mtp_ffn, h)?,
            w2: lin(d, "mtp_w2", h, cfg.mtp_ffn)?,
            out_norm: upload_ones(d, h)?,
        }))
    }

    /// The paged KV cache of every layer: latent entries and their scales, indexer keys
    /// and theirs.
    pub fn cache(&self, d: &mut dyn ServeDevice, pages: usize) -> Result<Vec<LayerCache>> {
        let cfg = self.cfg;
        let slots = pages * cfg.page_size;
        let mut cache = Vec::with_capacity(cfg.layers.len());
        for lc in &cfg.layers {
            let keys = match (lc.has_indexer, cfg.indexer) {
                (true, Some(ix)) => {
                    Some((d.alloc(Dt::U8, slots * ix.dim)?, d.alloc(Dt::F32, slots)?))
                }
                _ => None,
            };
            cache.push(LayerCache {
                kv: d.alloc(Dt::U8, slots * cfg.latent)?,
                kv_scale: d.alloc(Dt::F32, slots)?,
                keys,
            });
        }
        Ok(cache)
    }
}
