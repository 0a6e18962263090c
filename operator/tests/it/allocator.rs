//! The `shardring` binary's allocator as it is built: jemalloc with the
//! settings of `.cargo/config.toml` (one arena, freed pages returned by a
//! background thread within about thirty seconds),
//! read back from jemalloc's own statistics, which it prints at exit when
//! `_RJEM_MALLOC_CONF` asks for them.

use std::process::Command;

#[test]
fn the_binary_allocates_with_one_arena_whose_freed_pages_a_background_thread_returns() {
    let output = Command::new(env!("CARGO_BIN_EXE_shardring"))
        .arg("crds")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("run shardring");
    assert!(output.status.success(), "shardring crds failed: {output:?}");
    let stats = String::from_utf8_lossy(&output.stderr);
    for setting in [
        "opt.narenas: 1\n",
        "opt.background_thread: true ",
        "opt.dirty_decay_ms: 30000 ",
        "opt.muzzy_decay_ms: 0 ",
    ] {
        assert!(
            stats.contains(setting),
            "jemalloc's statistics lack {setting:?}: is the binary built without \
             .cargo/config.toml's JEMALLOC_SYS_WITH_MALLOC_CONF?\n{}",
            stats.lines().take(40).collect::<Vec<_>>().join("\n")
        );
    }
}
