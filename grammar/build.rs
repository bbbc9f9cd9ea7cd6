fn main() {
    // Grammar files live in src/; lalrpop writes the generated parsers to OUT_DIR.
    lalrpop::Configuration::new()
        .use_cargo_dir_conventions()
        .process()
        .expect("lalrpop grammar failed to build");
}
