//! Generates the url-frontier service's code from `proto/urlfrontier.proto` when the `serve`
//! feature is on; nothing otherwise.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "serve")]
    serve();
}

#[cfg(feature = "serve")]
fn serve() {
    println!("cargo:rerun-if-changed=proto/urlfrontier.proto");
    println!("cargo:rerun-if-changed=proto/crivello_cluster.proto");
    // protoc comes from a crate (no system protoc needed), unless PROTOC names one.
    if std::env::var_os("PROTOC").is_none() {
        let protoc =
            protoc_bin_vendored::protoc_bin_path().expect("protoc from protoc-bin-vendored");
        std::env::set_var("PROTOC", protoc);
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(
            &["proto/urlfrontier.proto", "proto/crivello_cluster.proto"],
            &["proto"],
        )
        .expect("compiling the .proto files");
}
