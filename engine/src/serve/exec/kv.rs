//! KV hand-over between ranks: a sequence's cache pages out and in as bytes.

use super::*;

impl Executor {
    /// The cache buffers of layer `l` a hand-over moves, with their entry width (0 for
    /// the f32 scales): latent entries and scales, indexer keys and scales.
    fn kv_parts(&self, l: usize) -> Vec<(Buf, usize)> {
        let c = &self.cache[l];
        let mut parts = vec![(c.kv, self.cfg.latent), (c.kv_scale, 0)];
        if let (Some((k, s)), Some(ix)) = (c.keys, self.cfg.indexer) {
            parts.push((k, ix.dim));
            parts.push((s, 0));
        }
        parts
    }

    /// KV bytes of `pages` (every layer's entries and scales, indexer keys included),
    /// for handing a request over to another group.
    pub fn export_kv(&mut self, pages: &[u32]) -> Result<Vec<u8>> {
        let p = self.cfg.page_size;
        let mut out = Vec::with_capacity(pages.len() * p * self.cfg.kv_bytes_per_token());
        for l in 0..self.cache.len() {
            for (buf, width) in self.kv_parts(l) {
                for &pg in pages {
                    let pg = pg as usize;
                    if pg >= self.pages {
                        return Err(bad(format!("page {pg} outside the cache")));
                    }
                    if width > 0 {
                        out.extend(self.dev.read_u8(buf, pg * p * width, p * width)?);
                    } else {
                        for v in self.dev.read_f32(buf, pg * p, p)? {
                            out.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Writes KV bytes exported by [`Executor::export_kv`] into `pages`.
    pub fn import_kv(&mut self, pages: &[u32], bytes: &[u8]) -> Result<()> {
        let p = self.cfg.page_size;
        if bytes.len() != pages.len() * p * self.cfg.kv_bytes_per_token() {
            return Err(bad(format!(
                "KV hand-over of {} bytes for {} pages (expected {})",
                bytes.len(),
                pages.len(),
                pages.len() * p * self.cfg.kv_bytes_per_token()
            )));
        }
        let mut at = 0;
        for l in 0..self.cache.len() {
            for (buf, width) in self.kv_parts(l) {
                for &pg in pages {
                    let pg = pg as usize;
                    if pg >= self.pages {
                        return Err(bad(format!("page {pg} outside the cache")));
                    }
                    if width > 0 {
                        self.dev
                            .write_u8(buf, pg * p * width, &bytes[at..at + p * width])?;
                        at += p * width;
                    } else {
                        let v: Vec<f32> = bytes[at..at + 4 * p]
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect();
                        self.dev.write_f32(buf, pg * p, &v)?;
                        at += 4 * p;
                    }
                }
            }
        }
        Ok(())
    }
}
