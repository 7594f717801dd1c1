//! The create's checks and its recovery table, on real files.

use super::*;

fn folder(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("osprey-commit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

#[test]
fn names_that_collide_or_hold_other_things_are_refused() {
    let d = folder("check");
    let (s, m) = (d.join("state.snap"), d.join("mem.snap"));
    Targets::check(&s, &m, &[]).expect("fresh names");
    let e = Targets::check(&s, &s, &[]).expect_err("the same name");
    assert!(
        matches!(
            e,
            TargetError::Same {
                field: "mem_file_path",
                ..
            }
        ),
        "{e}"
    );
    let e = Targets::check(&staged(&m), &m, &[]).expect_err("M.tmp as S");
    assert!(matches!(e, TargetError::Same { .. }), "{e}");
    std::fs::write(&s, b"x").expect("file");
    std::fs::hard_link(&s, &m).expect("link");
    let e = Targets::check(&s, &m, &[]).expect_err("one file, two names");
    assert!(matches!(e, TargetError::Same { .. }), "{e}");
    std::fs::remove_file(&m).expect("unlink");
    let disk = d.join("disk.img");
    std::fs::write(&disk, b"disk").expect("disk");
    let protected = [Protected::of_path("drive disk0's file".into(), &disk).expect("stat")];
    std::fs::hard_link(&disk, staged(&m)).expect("link");
    let e = Targets::check(&s, &m, &protected).expect_err("a temporary is the disk");
    assert!(
        e.to_string().contains("mem_file_path")
            && e.to_string().contains("would replace drive disk0's file"),
        "{e}"
    );
    std::fs::remove_file(staged(&m)).expect("unlink");
    std::fs::create_dir(&m).expect("a folder");
    let e = Targets::check(&s, &m, &[]).expect_err("a folder");
    assert!(
        e.to_string().contains("not a regular file (a directory)"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).ok();
}

/// Writes `which`'s file through the protocol up to its temporary.
fn stage(t: &Targets, which: Which, bytes: &[u8]) {
    let mut f = t.create(which).expect("create");
    f.write_all(bytes).expect("write");
    t.stage(which, f).expect("stage");
}

#[test]
fn recovery_finishes_or_undoes_an_interrupted_create() {
    let d = folder("recover");
    let (s, m) = (d.join("state.snap"), d.join("mem.snap"));
    let t = Targets::check(&s, &m, &[]).expect("names");
    stage(&t, Which::Memory, b"mem 1");
    stage(&t, Which::State, b"state 1");
    t.commit().expect("commit");
    let read = |p: &Path| std::fs::read(p).unwrap_or_default();
    assert_eq!(
        (read(&m), read(&s)),
        (b"mem 1".to_vec(), b"state 1".to_vec())
    );

    // Stopped before the commit point, with both temporaries or the memory's alone: the old
    // pair stands and the temporaries go.
    for both in [true, false] {
        stage(&t, Which::Memory, b"mem 2");
        if both {
            stage(&t, Which::State, b"state 2");
        }
        std::fs::write(partial(&s), b"half").expect("a partial file");
        t.recover().expect("recover");
        assert_eq!(
            (read(&m), read(&s)),
            (b"mem 1".to_vec(), b"state 1".to_vec())
        );
        for p in [staged(&s), staged(&m), partial(&s), partial(&m)] {
            assert!(!p.exists(), "{} left", p.display());
        }
    }
    // Stopped between the renames: the state's rename is finished.
    stage(&t, Which::Memory, b"mem 3");
    stage(&t, Which::State, b"state 3");
    std::fs::rename(staged(&m), &m).expect("the commit point");
    t.recover().expect("recover");
    assert_eq!(
        (read(&m), read(&s)),
        (b"mem 3".to_vec(), b"state 3".to_vec())
    );
    assert!(!staged(&s).exists());
    std::fs::remove_dir_all(&d).ok();
}
