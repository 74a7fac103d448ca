//! Generates the url-frontier client from the repository's `proto/urlfrontier.proto`.

fn main() {
    println!("cargo:rerun-if-changed=../proto/urlfrontier.proto");
    if std::env::var_os("PROTOC").is_none() {
        let protoc =
            protoc_bin_vendored::protoc_bin_path().expect("protoc from protoc-bin-vendored");
        std::env::set_var("PROTOC", protoc);
    }
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_protos(&["../proto/urlfrontier.proto"], &["../proto"])
        .expect("compiling ../proto/urlfrontier.proto");
}
