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

    /// The runs a hand-over of `pages` moves, in order: (buffer, entry width (0 for f32
    /// scales), first element) for every layer's parts and every page, each of
    /// `page_size` entries. Checks the pages once.
    fn kv_runs(&self, pages: &[u32]) -> Result<Vec<(Buf, usize, usize)>> {
        let p = self.cfg.page_size;
        if let Some(&pg) = pages.iter().find(|&&pg| pg as usize >= self.pages) {
            return Err(bad(format!("page {pg} outside the cache")));
        }
        let mut runs = Vec::new();
        for l in 0..self.cache.len() {
            for (buf, width) in self.kv_parts(l) {
                for &pg in pages {
                    runs.push((buf, width, pg as usize * p * width.max(1)));
                }
            }
        }
        Ok(runs)
    }

    /// KV bytes of `pages` (every layer's entries and scales, indexer keys included),
    /// for handing a request over to another group.
    pub fn export_kv(&mut self, pages: &[u32]) -> Result<Vec<u8>> {
        let p = self.cfg.page_size;
        let mut out = Vec::with_capacity(pages.len() * p * self.cfg.kv_bytes_per_token());
        for (buf, width, at) in self.kv_runs(pages)? {
            if width > 0 {
                out.extend(self.dev.read_u8(buf, at, p * width)?);
            } else {
                for v in self.dev.read_f32(buf, at, p)? {
                    out.extend_from_slice(&v.to_le_bytes());
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
        let mut from = 0;
        for (buf, width, at) in self.kv_runs(pages)? {
            if width > 0 {
                self.dev.write_u8(buf, at, &bytes[from..from + p * width])?;
                from += p * width;
            } else {
                let v: Vec<f32> = bytes[from..from + 4 * p]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                self.dev.write_f32(buf, at, &v)?;
                from += 4 * p;
            }
        }
        Ok(())
    }
}
