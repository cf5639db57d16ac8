//! The MTP head: drafts for the next decode step.

use super::*;

impl Executor {
    /// The MTP head: `drafts` passes from the residual rows `base` of `x` and the last
    /// emitted tokens; returns each sequence's drafts.
    pub(super) fn draft(
        &mut self,
        x: Buf,
        base: &[i32],
        last: &[i32],
        drafts: usize,
    ) -> Result<Vec<Vec<u32>>> {
        let Some(w) = self.mtp.as_ref().map(|m| {
            (
                m.norm_h, m.norm_e, m.proj, m.ffn_norm, m.w13, m.w2, m.out_norm,
            )
        }) else {
            return Err(bad(format!(
                "model {} has no MTP head but {drafts} drafts were asked",
                self.cfg.name
            )));
        };
        let (norm_h, norm_e, proj, ffn_norm, w13, w2, out_norm) = w;
        let (h, b) = (self.cfg.hidden, base.len());
        let mut hb = self.gather(x, h, base)?;
        let mut e = self.gather(self.embed, h, last)?;
        let mut out = vec![Vec::with_capacity(drafts); b];
        for i in 0..drafts {
            let en = self.norm(e, None, norm_e, b)?;
            let hn = self.norm(hb, None, norm_h, b)?;
            self.dev.add(en, hn)?;
            rec!(self, Call::add(h, b as u64));
            let m = self.dense(proj, en, b)?;
            let mn = self.norm(m, None, ffn_norm, b)?;
            let gu = self.dense(w13, mn, b)?;
            let act = self.swiglu(gu, b, self.cfg.mtp_ffn)?;
            let f = self.dense(w2, act, b)?;
            let on = self.norm(m, Some(f), out_norm, b)?;
            let logits = self.dense(self.lm_head, on, b)?;
            let d = self.argmax(logits, b)?;
            for (o, &t) in out.iter_mut().zip(&d) {
                o.push(t as u32);
            }
            self.free(&[en, hn, mn, gu, act, f, on, logits, hb, e]);
            hb = m;
            e = if i + 1 < drafts {
                self.gather(self.embed, h, &d)?
            } else {
                self.alloc(0)?
            };
        }
        self.free(&[hb, e]);
        Ok(out)
    }
}
