//! The cache of recent signatures: a direct-mapped table that answers "was this signature
//! pushed before?" with "yes, for certain" or "not known".
//!
//! A signature is stored at the slot its top bits choose, replacing whatever was there, so a
//! hit is exact (the same 64-bit signature was pushed earlier) and a miss says nothing. The
//! sieve treats two URLs with the same signature as one anyway, so a hit is a repeat under
//! the sieve's own rule. Signature 0 is never cached (an empty slot holds 0).

/// A direct-mapped table of recent signatures.
pub(crate) struct Recent {
    slots: Vec<u64>,
    shift: u32,
}

impl Recent {
    /// A table of `entries` slots (0, or a power of two); 0 makes every lookup a miss.
    pub(crate) fn new(entries: usize) -> Recent {
        debug_assert!(entries == 0 || entries.is_power_of_two());
        Recent {
            slots: vec![0; entries],
            shift: 64 - entries.max(1).trailing_zeros(),
        }
    }

    /// The slot of `sig`. A shift by 64 cannot happen: one slot has shift 64 only when
    /// `entries` is 1, and then `checked_shr` gives slot 0.
    #[inline]
    fn slot(&self, sig: u64) -> usize {
        sig.checked_shr(self.shift).unwrap_or(0) as usize
    }

    /// Starts loading the slot of `sig` into the processor's cache, so that a later
    /// [`Recent::seen`] of `sig` does not wait for memory.
    #[inline]
    pub(crate) fn prefetch(&self, sig: u64) {
        if let Some(slot) = self.slots.get(self.slot(sig)) {
            crate::hint::prefetch(slot);
        }
    }

    /// Whether `sig` was inserted before and is still there; inserts nothing.
    #[inline]
    pub(crate) fn contains(&self, sig: u64) -> bool {
        sig != 0 && self.slots.get(self.slot(sig)) == Some(&sig)
    }

    /// Whether `sig` was inserted before (and is still there); inserts it otherwise.
    #[inline]
    pub(crate) fn seen(&mut self, sig: u64) -> bool {
        if self.slots.is_empty() || sig == 0 {
            return false;
        }
        let i = self.slot(sig);
        let slot = &mut self.slots[i];
        if *slot == sig {
            return true;
        }
        *slot = sig;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn a_hit_is_always_a_signature_inserted_before() {
        for entries in [0usize, 1, 2, 64, 1 << 12] {
            let mut r = Recent::new(entries);
            let mut inserted = std::collections::HashSet::new();
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for i in 0..20_000u64 {
                // A few hundred distinct signatures, revisited often.
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let sig = (x >> 55).wrapping_mul(0x2545_f491_4f6c_dd1d) ^ (i % 3);
                let hit = r.seen(sig);
                assert!(!hit || inserted.contains(&sig), "a hit for a new signature");
                inserted.insert(sig);
            }
            assert!(!r.seen(0) && !r.seen(0), "0 is never cached");
        }
        let mut r = Recent::new(1 << 10);
        assert!(!r.seen(42));
        assert!(r.seen(42), "a signature just inserted is found");
    }
}
