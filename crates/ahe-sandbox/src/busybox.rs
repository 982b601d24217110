//! ahe's statically linked busybox on this host: the program its in-sandbox checks run
//! (`ahe-bench`'s `inside`) and the docker backend puts on a read-only volume.

use std::path::PathBuf;

/// Environment variable naming the busybox to use instead of the default paths.
pub const BUSYBOX_ENV: &str = "AHE_BUSYBOX";

/// Where Debian's `busybox-static` package puts its binary.
const BUSYBOX_PATHS: &[&str] = &["/bin/busybox", "/usr/bin/busybox"];

/// The host path of a statically linked busybox (`$AHE_BUSYBOX`, else Debian's
/// `busybox-static`), or why there is none.
pub fn busybox() -> Result<PathBuf, String> {
    let named = std::env::var_os(BUSYBOX_ENV).map(PathBuf::from);
    let candidates: Vec<PathBuf> = match named {
        Some(p) => vec![p],
        None => BUSYBOX_PATHS.iter().map(PathBuf::from).collect(),
    };
    for p in &candidates {
        if let Ok(bytes) = std::fs::read(p) {
            return if is_static_elf(&bytes) {
                Ok(p.clone())
            } else {
                Err(format!(
                    "{} is not a statically linked program (install Debian's busybox-static \
                     package, whose /bin/busybox is)",
                    p.display()
                ))
            };
        }
    }
    Err(format!(
        "no statically linked busybox at {} (install Debian's busybox-static package: \
         apt-get install busybox-static; or name one with {BUSYBOX_ENV})",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    ))
}

/// Whether `b` is a 64-bit little-endian ELF executable without a program interpreter (no
/// `PT_INTERP`: nothing is loaded before its own code).
pub fn is_static_elf(b: &[u8]) -> bool {
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
    };
    if !b.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..phnum as usize).all(|i| {
        let at = phoff as usize + i * phentsize as usize;
        u32_at(at).is_some_and(|t| t != 3)
    })
}
