use super::*;

#[test]
fn every_file_of_packaging_hosts_is_built_in_and_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/hosts");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("packaging/hosts")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".yaml")
                .map(str::to_string)
        })
        .collect();
    on_disk.sort();
    assert_eq!(names(), on_disk);
    for (name, text) in SHIPPED {
        let desc = super::super::HostDesc::from_yaml(text).expect(name);
        assert_eq!(desc.name, *name);
    }
}
