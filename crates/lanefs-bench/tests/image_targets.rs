//! The image-store targets: every matrix workload and FSMARK_SYNC run on
//! the engine in process over a fresh image file (`inproc-image`) and meet
//! their post-conditions, and the target names parse. (`lanefs-image`, the
//! FUSE mount on a loop device, needs root and the `lanefs` binary: smoke it
//! with `lanefs bench -t ext4,lanefs-image -w FSMARK_SYNC`.)

use lanefs_bench::backend::inproc::Inproc;
use lanefs_bench::backend::Backend;
use lanefs_bench::target::TargetSpec;
use lanefs_bench::workload::{self, Params, Workload};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn params() -> Params {
    Params {
        duration: Duration::from_millis(30),
        files: 300,
        fsmark_bytes: 1000,
        seed: 7,
    }
}

#[test]
fn workloads_on_inproc_image() {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir();
    let workloads = Workload::MATRIX
        .iter()
        .copied()
        .chain([Workload::Fsmark, Workload::FsmarkSync]);
    for w in workloads {
        for threads in [1, 2] {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let img = dir.join(format!("lanefs-bench-test.{}.{n}.img", std::process::id()));
            let b = Inproc::on_image("default", &img, 64 << 20).unwrap();
            assert!(b.unsupported(w).is_none(), "{} is n/a", w.name());
            let m = workload::run(&b, w, threads, &params())
                .unwrap_or_else(|e| panic!("inproc-image {} {threads}t: {e}", w.name()));
            assert!(m.total_ops() > 0, "{} {threads}t did nothing", w.name());
            drop(b);
            std::fs::remove_file(&img).unwrap();
        }
    }
}

#[test]
fn image_target_names_parse() {
    let v = vec!["default".to_string()];
    let t = TargetSpec::parse("lanefs-image", &v).unwrap();
    assert_eq!(t, vec![TargetSpec::LanefsImage]);
    assert_eq!(t[0].name(), "lanefs-image");
    let t = TargetSpec::parse("inproc-image", &v).unwrap();
    assert_eq!(t[0].name(), "inproc-image");
    assert_eq!(t[0].variant(), "default");
}
