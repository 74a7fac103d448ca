//! The Python package's suites (`python/tests/`, pytest): the API over the library, and real
//! Scrapy crawls of a local site with crivello's scheduler and duplicate filter (`kill -9`
//! and resume among them). They run against the `crivello` package installed in the Python
//! that `CRIVELLO_PYTHON` names (default `python3`), with Scrapy, mypy and pytest: build and
//! install it first (`pip install .`, or `maturin build` then `pip install` of the wheel).
//! Without them the test says so and passes, unless `CRIVELLO_REQUIRE_TOOLS` is set
//! (`.ci/run` builds the wheel, installs it with them, and sets it).

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_package_passes_its_suites() {
    let python = std::env::var("CRIVELLO_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ready = Command::new(&python)
        .args(["-c", "import crivello, scrapy, mypy, pytest"])
        // Not from the source tree's `python/crivello`, which has no native module.
        .current_dir(std::env::temp_dir())
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        let what = format!(
            "{python} with the crivello package installed (pip install .), scrapy, mypy and \
             pytest is needed for the Python package's suites (CRIVELLO_PYTHON names the \
             interpreter)"
        );
        assert!(
            std::env::var_os("CRIVELLO_REQUIRE_TOOLS").is_none(),
            "{what}"
        );
        eprintln!("skipped: {what}");
        return;
    }
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("python").join("tests"))
        .current_dir(root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run pytest");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "the Python package's suites failed:\n{text}"
    );
}
