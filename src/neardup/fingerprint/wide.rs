//! The fingerprint's two hot loops with AVX-512 (x86_64 processors that have its foundation,
//! byte and word, doubleword and quadword, and byte-permutation instructions, VBMI and VBMI2):
//! normalising ASCII sixty-four bytes at a time, and hashing and counting the windows of five
//! ASCII bytes eight at a time. Each computes exactly what its portable counterpart in the
//! parent module computes; the tests run both over the same texts and compare.

use std::arch::x86_64::*;

use super::{add_at, Counters, ASCII_KEPT, SHINGLE, XXH3_FLIP_4TO8};

/// Whether this processor has every instruction the functions of this module use.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vbmi")
        && is_x86_feature_detected!("avx512vbmi2")
}

/// The mask of the first `n` of 64 bytes (all of them from 64 on).
#[inline(always)]
fn first_bytes(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The portable `normalise_ascii` of the parent module, sixty-four bytes at a time: the
/// ASCII characters at the start of `bytes`, normalised and appended to `out`; `gap` says
/// whether a space is owed before the next kept character. Returns how many bytes were read
/// (up to the first byte of a multi-byte character) and whether a space is owed after them.
///
/// The portable version writes the owed space just before the kept character that follows a
/// run of separators; here the last separator of the run becomes that space (it is followed by
/// a kept character, looked up one byte ahead across a block's end), so that every byte read
/// gives at most one byte written and a block is one compression of the kept bytes. A space
/// owed from before `bytes` goes first when `bytes` starts with a kept character.
///
/// # Safety
///
/// The processor must have the instructions [`available`] checks.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512vbmi2")]
pub(super) unsafe fn normalise_ascii(bytes: &[u8], out: &mut Vec<u8>, gap: bool) -> (usize, bool) {
    // At most one byte written per byte read, one owed space and a whole block stored past
    // the last byte kept.
    out.reserve(bytes.len() + 1 + 64);
    let start = out.len();
    let buf = out.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    // SAFETY: ASCII_KEPT has 256 bytes; the two loads read its first 128.
    let (low, high) = unsafe {
        (
            _mm512_loadu_si512(ASCII_KEPT.as_ptr().cast()),
            _mm512_loadu_si512(ASCII_KEPT.as_ptr().add(64).cast()),
        )
    };
    let spaces = _mm512_set1_epi8(b' ' as i8);
    let mut n = 0usize;
    let mut gap = gap;
    let mut i = 0usize;
    while i < bytes.len() {
        let left = bytes.len() - i;
        let load = first_bytes(left);
        // SAFETY: the masked load reads only the bytes of `load`, all within `bytes`
        // (the others are neither read nor faulted on).
        let v = unsafe { _mm512_maskz_loadu_epi8(load, bytes.as_ptr().add(i).cast()) };
        let high_bit = _mm512_movepi8_mask(v) & load;
        let ascii = if high_bit != 0 {
            high_bit.trailing_zeros() as usize
        } else {
            left.min(64)
        };
        if ascii == 0 {
            break;
        }
        let valid = first_bytes(ascii);
        // Each ASCII byte's lower case when it is a letter or a digit, 0 otherwise.
        let c = _mm512_maskz_permutex2var_epi8(valid, low, v, high);
        let kept = _mm512_test_epi8_mask(c, c);
        // Whether the byte after the block is a kept character: only when the block ends
        // inside the run (otherwise the run ends with it and nothing follows it here).
        let next_kept = ascii == 64
            && bytes
                .get(i + 64)
                .is_some_and(|&b| ASCII_KEPT[usize::from(b)] != 0);
        let space = !kept & valid & ((kept >> 1) | (u64::from(next_kept) << 63));
        // Past the first block, a space owed before its first byte was written by the block
        // before, looking ahead.
        if i == 0 && gap && kept & 1 == 1 {
            // SAFETY: n < the capacity reserved (one owed space, once, at the start).
            unsafe { buf.add(n).write(b' ') };
            n += 1;
        }
        let packed =
            _mm512_maskz_compress_epi8(kept | space, _mm512_mask_blend_epi8(kept, spaces, c));
        // SAFETY: n <= i + 1 bytes were written so far, and the 64 stored end at
        // i + 65 <= bytes.len() + 65, within the capacity reserved.
        unsafe { _mm512_storeu_si512(buf.add(n).cast(), packed) };
        n += (kept | space).count_ones() as usize;
        gap = kept >> (ascii - 1) & 1 == 0;
        i += ascii;
        if ascii < 64 {
            break;
        }
    }
    // SAFETY: the `n` bytes after `start` were written above, within the capacity reserved
    // (the bytes stored past them are not counted).
    unsafe { out.set_len(start + n) };
    (i, gap)
}

/// Full adder of three vectors, bit by bit: (carries, sums), one instruction each.
#[inline]
#[target_feature(enable = "avx512f")]
fn csa(a: __m512i, b: __m512i, c: __m512i) -> (__m512i, __m512i) {
    (
        _mm512_ternarylogic_epi64::<0xE8>(a, b, c),
        _mm512_ternarylogic_epi64::<0x96>(a, b, c),
    )
}

/// The portable `vote_ascii5` of the parent module, eight windows to a vector: the features
/// of an ASCII text of more than five bytes, each window of five bytes, counted into
/// `counters`.
///
/// Each block of 64 bytes loaded gives four vectors of eight windows: lane `l` of a vector is
/// the word xxh3 forms from a window of 4 to 8 bytes (its last four bytes low, its first four
/// high), put together by one byte permutation; the hash follows xxh3's path in each lane
/// (lanes past the last window set to 0, which counts nothing). Sixteen vectors go through the
/// carry-save tree of the portable version, each lane counting on its own; a lane's sixteens
/// are added to the counters' planes, and what remains in the tree at the end to their planes
/// of units.
///
/// # Safety
///
/// The processor must have the instructions [`available`] checks.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vbmi,avx512vbmi2")]
pub(super) unsafe fn vote_ascii5(norm: &[u8], counters: &mut Counters) {
    const _: () = assert!(SHINGLE == 5);
    let windows = norm.len() - SHINGLE + 1;
    // Byte `b` of lane `l` of the vector of windows `8 k ..`: the byte at `8 k + l + 1 + b`
    // for the window's last four bytes (b < 4), at `8 k + l + b − 4` for its first four.
    let index = |k: usize| {
        let bytes: [u8; 64] = std::array::from_fn(|at| {
            let (l, b) = (at / 8, at % 8);
            (8 * k + l + if b < 4 { b + 1 } else { b - 4 }) as u8
        });
        // SAFETY: reads the 64 bytes of the array.
        unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) }
    };
    let indices = [index(0), index(1), index(2), index(3)];
    let flip = _mm512_set1_epi64(XXH3_FLIP_4TO8 as i64);
    let prime = _mm512_set1_epi64(0x9FB2_1C65_1E98_DF25u64 as i64);
    let len = _mm512_set1_epi64(SHINGLE as i64);
    let hash = |block: __m512i, k: usize, first: usize| {
        let mut h = _mm512_xor_si512(_mm512_permutexvar_epi8(indices[k], block), flip);
        h = _mm512_ternarylogic_epi64::<0x96>(
            h,
            _mm512_rol_epi64::<49>(h),
            _mm512_rol_epi64::<24>(h),
        );
        h = _mm512_mullo_epi64(h, prime);
        h = _mm512_xor_si512(h, _mm512_add_epi64(_mm512_srli_epi64::<35>(h), len));
        h = _mm512_mullo_epi64(h, prime);
        h = _mm512_xor_si512(h, _mm512_srli_epi64::<28>(h));
        // Lanes of windows `first + 8 k ..` that exist.
        let lanes = windows.saturating_sub(first + 8 * k).min(8);
        _mm512_maskz_mov_epi64(((1u16 << lanes) - 1) as u8, h)
    };
    let zero = _mm512_setzero_si512();
    let (mut ones, mut twos, mut fours, mut eights) = (zero, zero, zero, zero);
    // Windows `first ..` come from the bytes loaded at `first`, 32 to a block.
    let mut first = 0;
    let load = |first: usize| {
        let mask = first_bytes(norm.len().saturating_sub(first));
        // SAFETY: the masked load reads only the bytes of `mask`, all within `norm`.
        unsafe { _mm512_maskz_loadu_epi8(mask, norm.as_ptr().add(first.min(norm.len())).cast()) }
    };
    let mut lanes = [0u64; 8];
    // Plane `j` of the lanes' counts of sixteens (bit-sliced as the counters' planes), of
    // which the first `top` were reached: a lane counts one window in eight, and a run has
    // fewer than MAX_TEXT = 2^24 windows, so at most 2^17 sixteens (18 planes).
    let mut sixteens_planes = [zero; 18];
    let mut top = 0;
    while first < windows {
        // Sixteen vectors: four blocks of four.
        let quad = |first: usize, ones: &mut __m512i, twos: &mut __m512i| {
            let block = load(first);
            let (ta, o) = csa(*ones, hash(block, 0, first), hash(block, 1, first));
            let (tb, o) = csa(o, hash(block, 2, first), hash(block, 3, first));
            *ones = o;
            let (f, t) = csa(*twos, ta, tb);
            *twos = t;
            f
        };
        let fa = quad(first, &mut ones, &mut twos);
        let fb = quad(first + 32, &mut ones, &mut twos);
        let (ea, f) = csa(fours, fa, fb);
        fours = f;
        let fa = quad(first + 64, &mut ones, &mut twos);
        let fb = quad(first + 96, &mut ones, &mut twos);
        let (eb, f) = csa(fours, fa, fb);
        fours = f;
        let (sixteens, e) = csa(eights, ea, eb);
        eights = e;
        // A ripple-carry addition of one vector to the sixteens, stopped when no lane
        // carries.
        let mut carry = sixteens;
        let mut j = 0;
        while _mm512_test_epi64_mask(carry, carry) != 0 {
            let t = _mm512_and_si512(sixteens_planes[j], carry);
            sixteens_planes[j] = _mm512_xor_si512(sixteens_planes[j], carry);
            carry = t;
            j += 1;
        }
        top = top.max(j);
        first += 128;
    }
    for (j, &v) in sixteens_planes[..top].iter().enumerate() {
        // SAFETY: stores the 64 bytes of `lanes`.
        unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), v) };
        for &w in &lanes {
            add_at(&mut counters.planes, j, w);
        }
    }
    for (j, v) in [ones, twos, fours, eights].into_iter().enumerate() {
        // SAFETY: stores the 64 bytes of `lanes`.
        unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), v) };
        for &w in &lanes {
            add_at(&mut counters.units, j, w);
        }
    }
    counters.features += windows as u64;
}
