//! Real small filesystems for the disk-full and read-only tests of the store and the engine: a
//! tmpfs of a few hundred KB (ENOSPC), or an ext4 image on a loop device mounted with
//! `errors=remount-ro` whose error is triggered through sysfs, as the kernel does after an I/O
//! error (EROFS), or either remounted read-only and back. Root only: without root, or when the
//! kernel refuses the mount, a test says why and skips ([`crate::skip`]: a failure where skips
//! are forbidden). Whatever was mounted is unmounted when the guard drops, a test's panic
//! included.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::skip::skip;

/// A filesystem mounted for one test; unmounted on drop.
pub struct Mounted {
    /// The mount point (mode 0700, so the store accepts a state dir under it).
    pub root: PathBuf,
    image: Option<PathBuf>,
    mounted: bool,
    _dir: tempfile::TempDir,
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl Mounted {
    fn base(test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
        if !nix::unistd::geteuid().is_root() {
            skip(test, "needs root to mount a small filesystem");
            return None;
        }
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().join("mnt");
        std::fs::create_dir(&root).expect("mount point");
        Some((dir, root))
    }

    /// A tmpfs of `kib` KiB, or `None` (after saying why) when it cannot be mounted here.
    pub fn tmpfs(test: &str, kib: u64) -> Option<Mounted> {
        let (dir, root) = Self::base(test)?;
        let opts = format!("size={kib}k,mode=0700");
        if let Err(e) = run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opts, "tmpfs"])
            .arg(&root))
        {
            skip(test, &e);
            return None;
        }
        Some(Mounted {
            root,
            image: None,
            mounted: true,
            _dir: dir,
        })
    }

    /// An ext4 image of `mib` MiB on a loop device, mounted with `errors=remount-ro`.
    pub fn ext4(test: &str, mib: u64) -> Option<Mounted> {
        let (dir, root) = Self::base(test)?;
        let image = dir.path().join("ext4.img");
        let made = std::fs::File::create(&image)
            .and_then(|f| f.set_len(mib << 20))
            .map_err(|e| e.to_string())
            .and_then(|()| run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image)));
        if let Err(e) = made {
            skip(test, &e);
            return None;
        }
        let mut m = Mounted {
            root,
            image: Some(image),
            mounted: false,
            _dir: dir,
        };
        if let Err(e) = m.mount_image() {
            skip(test, &e);
            return None;
        }
        std::fs::set_permissions(&m.root, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
        Some(m)
    }

    fn mount_image(&mut self) -> Result<(), String> {
        let image = self.image.as_ref().expect("an ext4 image");
        run(Command::new("mount")
            .args(["-t", "ext4", "-o", "loop,errors=remount-ro"])
            .arg(image)
            .arg(&self.root))?;
        self.mounted = true;
        Ok(())
    }

    /// The ext4 filesystem hits an error: the kernel aborts its journal and turns it read-only
    /// (`emergency_ro`: no `remount,rw` brings it back), as after an I/O error.
    pub fn fail_ext4(&self) {
        let out = Command::new("findmnt")
            .args(["-no", "SOURCE"])
            .arg(&self.root)
            .output()
            .expect("findmnt");
        let source = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let dev = Path::new(&source)
            .file_name()
            .expect("a loop device")
            .to_string_lossy()
            .to_string();
        std::fs::write(
            format!("/sys/fs/ext4/{dev}/trigger_fs_error"),
            "nri-align test\n",
        )
        .expect("trigger an ext4 error");
    }

    /// How an operator recovers the ext4 filesystem: unmount, `e2fsck -fy`, mount again.
    pub fn repair_ext4(&mut self) {
        self.unmount().expect("unmount");
        let image = self.image.as_ref().expect("an ext4 image");
        // 1: errors corrected, the expected outcome after the triggered error.
        let st = Command::new("e2fsck")
            .arg("-fy")
            .arg(image)
            .output()
            .expect("e2fsck");
        assert!(matches!(st.status.code(), Some(0 | 1)), "e2fsck: {st:?}");
        self.mount_image().expect("mount again");
    }

    /// Remounts the filesystem read-only (`ro`) or writable again, as an operator does (or
    /// the kernel, read-only, after an error): writes fail with EROFS until it is writable.
    pub fn set_read_only(&self, ro: bool) {
        let opts = if ro { "remount,ro" } else { "remount,rw" };
        run(Command::new("mount").args(["-o", opts]).arg(&self.root)).expect("remount");
    }

    fn unmount(&mut self) -> Result<(), String> {
        if self.mounted {
            run(Command::new("umount").arg(&self.root))?;
            self.mounted = false;
        }
        Ok(())
    }

    /// Fills the filesystem with `filler` until a write fails with ENOSPC; returns its path.
    pub fn fill(&self) -> PathBuf {
        let path = self.root.join("filler");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("filler");
        let chunk = vec![0x5a_u8; 4096];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        // Smaller pieces for the end of the last page.
        while let Ok(n) = f.write(&chunk[..64]) {
            if n == 0 {
                break;
            }
        }
        path
    }

    /// Frees what [`Mounted::fill`] took.
    pub fn free(&self) {
        std::fs::remove_file(self.root.join("filler")).expect("remove the filler");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted && self.unmount().is_err() {
            // Something still holds a file open on it (a test that failed midway): detach it
            // now, the kernel unmounts it once the last file is closed.
            let _ = Command::new("umount").arg("-l").arg(&self.root).status();
        }
    }
}
