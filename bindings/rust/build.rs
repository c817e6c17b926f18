// Links libpt2rt.so: from PT2RT_LIB_DIR (a bundle's lib/, e.g. dist/lib), else the linker's default paths.
fn main() {
    println!("cargo:rerun-if-env-changed=PT2RT_LIB_DIR");
    if let Ok(dir) = std::env::var("PT2RT_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    println!("cargo:rustc-link-lib=dylib=pt2rt");
}
