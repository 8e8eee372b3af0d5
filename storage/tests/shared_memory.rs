//! `cpu_shared` blocks can be mapped by another process: a child process maps the block through
//! the inherited file descriptor, checks what the parent wrote and writes an answer back.

use std::process::Command;

use storage::{Context, PoolKind, StorageManager};

const SIZE: usize = 8192;

fn child(fd: i32) {
    // SAFETY: maps the descriptor the parent passed for exactly this purpose; checked for failure.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "child cannot map fd {fd}: {}",
            std::io::Error::last_os_error()
        );
        let bytes = std::slice::from_raw_parts_mut(p.cast::<u8>(), SIZE);
        assert_eq!(&bytes[..21], b"hello from the parent");
        bytes[4096..4116].copy_from_slice(b"hello from the child");
        libc::munmap(p, SIZE);
    }
}

#[test]
fn another_process_maps_shared_memory() {
    if let Ok(fd) = std::env::var("MXRS_SHM_CHILD_FD") {
        return child(fd.parse().expect("fd number"));
    }
    for kind in [PoolKind::Unpooled, PoolKind::PooledExact] {
        let m = StorageManager::new(Context::cpu_shared(0), kind);
        let mut h = m.alloc(SIZE).unwrap();
        h.write(0, b"hello from the parent").unwrap();
        let fd = h.shared_fd().expect("shared blocks have a descriptor");
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "another_process_maps_shared_memory",
                "--test-threads",
                "1",
            ])
            .env("MXRS_SHM_CHILD_FD", fd.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "child failed: {status}");
        let mut answer = [0u8; 20];
        h.read(4096, &mut answer).unwrap();
        assert_eq!(&answer, b"hello from the child");
    }
}
