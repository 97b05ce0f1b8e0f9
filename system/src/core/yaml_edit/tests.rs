use super::*;
use serde_json::json;

/// A Helm chart's values file as charts write them (Bitnami's layout: `## @param` comments,
/// nested image settings, quoted and plain strings, empty mappings, a block scalar).
const VALUES: &str = r#"## @section Global parameters
## Global Docker image parameters
##
global:
  imageRegistry: ""
  ## E.g.
  ## imagePullSecrets:
  ##   - myRegistryKeySecretName
  ##
  imagePullSecrets: []

## @section Common parameters
replicaCount: 2

## Bitnami NGINX image
## @param image.registry [default: REGISTRY_NAME] NGINX image registry
## @param image.tag NGINX image tag (immutable tags are recommended)
##
image:
  registry: docker.io
  repository: bitnami/nginx
  tag: 1.25.3-debian-12-r0   # keep in step with the chart's appVersion
  digest: ""
  ## Specify a imagePullPolicy
  pullPolicy: IfNotPresent
  debug: false

podAnnotations: {}
resources:
  # limits:
  #   cpu: 100m

serverBlock: |-
  server {
    listen 0.0.0.0:8080;
    tag: not-a-key
  }
version: 1.10
name: 'shop'
"#;

fn keys(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

/// The lines of `after` that differ from `before` (same number of lines).
fn changed_lines(before: &str, after: &str) -> Vec<(String, String)> {
    before
        .lines()
        .zip(after.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_promoted_value_changes_only_its_own_text() {
    let mut doc = YamlDoc::parse(VALUES).unwrap();
    assert_eq!(doc.value()["image"]["tag"], json!("1.25.3-debian-12-r0"));
    assert_eq!(
        doc.set(&keys("image.tag"), &json!("1.25.4-debian-12-r1")),
        Ok(true)
    );
    assert_eq!(doc.text().len(), VALUES.len());
    assert_eq!(
        changed_lines(VALUES, doc.text()),
        [(
            "  tag: 1.25.3-debian-12-r0   # keep in step with the chart's appVersion".into(),
            "  tag: 1.25.4-debian-12-r1   # keep in step with the chart's appVersion".into()
        )]
    );
    assert_eq!(doc.value()["image"]["tag"], json!("1.25.4-debian-12-r1"));
    // The same value again: nothing changes.
    let before = doc.text().to_string();
    assert_eq!(
        doc.set(&keys("image.tag"), &json!("1.25.4-debian-12-r1")),
        Ok(false)
    );
    assert_eq!(doc.text(), before);
}

#[test]
fn quoting_is_kept_and_added_where_a_plain_value_would_change_type() {
    let mut doc = YamlDoc::parse(VALUES).unwrap();
    // `version: 1.10` is the float 1.1 to a YAML reader; "1.11" written plain would be too.
    assert_eq!(doc.value()["version"], json!(1.1));
    doc.set(&keys("version"), &json!("1.11")).unwrap();
    doc.set(&keys("name"), &json!("shop's")).unwrap();
    doc.set(&keys("image.digest"), &json!("sha256:4f2a"))
        .unwrap();
    doc.set(&keys("global.imageRegistry"), &json!("registry.example"))
        .unwrap();
    doc.set(&keys("image.pullPolicy"), &json!("yes")).unwrap();
    doc.set(&keys("replicaCount"), &json!(3)).unwrap();
    doc.set(&keys("image.debug"), &json!(true)).unwrap();
    assert_eq!(
        changed_lines(VALUES, doc.text()),
        [
            (
                "  imageRegistry: \"\"",
                "  imageRegistry: \"registry.example\""
            ),
            ("replicaCount: 2", "replicaCount: 3"),
            ("  digest: \"\"", "  digest: \"sha256:4f2a\""),
            ("  pullPolicy: IfNotPresent", "  pullPolicy: \"yes\""),
            ("  debug: false", "  debug: true"),
            ("version: 1.10", "version: \"1.11\""),
            ("name: 'shop'", "name: 'shop''s'"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(doc.value()["version"], json!("1.11"));
    assert_eq!(doc.value()["image"]["pullPolicy"], json!("yes"));
    assert_eq!(doc.value()["name"], json!("shop's"));
}

#[test]
fn a_missing_key_is_added_at_the_end_of_its_mapping() {
    let mut doc = YamlDoc::parse(VALUES).unwrap();
    doc.set(&keys("image.pullSecret"), &json!("regcred"))
        .unwrap();
    assert!(
        doc.text()
            .contains("  debug: false\n  pullSecret: regcred\n\npodAnnotations: {}\n"),
        "{}",
        doc.text()
    );
    // Under a key that holds nothing yet (`resources:` with only comments below it).
    doc.set(&keys("resources.requests.cpu"), &json!("250m"))
        .unwrap();
    assert!(
        doc.text()
            .contains("resources:\n  requests:\n    cpu: 250m\n  # limits:\n"),
        "{}",
        doc.text()
    );
    // A new top-level key goes after the last one, not into the block scalar.
    doc.set(&keys("tag"), &json!("v2")).unwrap();
    assert!(
        doc.text().ends_with("name: 'shop'\ntag: v2\n"),
        "{}",
        doc.text()
    );
    assert_eq!(
        doc.value()["serverBlock"].as_str().unwrap().lines().count(),
        4
    );
    let mut expected: Value = serde_saphyr::from_str(VALUES).unwrap();
    expected["image"]["pullSecret"] = json!("regcred");
    expected["resources"] = json!({"requests": {"cpu": "250m"}});
    expected["tag"] = json!("v2");
    assert_eq!(doc.value(), &expected);
}

#[test]
fn values_that_cannot_be_edited_in_place_are_refused_with_their_path() {
    let doc = YamlDoc::parse(VALUES).unwrap();
    let refused = |path: &str, value: Value| {
        let mut copy = doc.clone();
        let error = copy.set(&keys(path), &value).unwrap_err().to_string();
        assert_eq!(copy.text(), VALUES, "a refused edit leaves the text alone");
        error
    };
    let flow_or_one =
        "is written in flow style or as one value; only block mappings are edited in place";
    for (path, value, refused_at, why) in [
        (
            "podAnnotations.checksum",
            json!("abc"),
            "podAnnotations",
            flow_or_one,
        ),
        (
            "serverBlock",
            json!("server {}"),
            "serverBlock",
            "is a block scalar (| or >); not edited in place",
        ),
        ("replicaCount.max", json!(3), "replicaCount", flow_or_one),
        (
            "image",
            json!("nginx"),
            "image",
            "is a mapping or a list, not one value",
        ),
        (
            "global.imagePullSecrets",
            json!("x"),
            "global.imagePullSecrets",
            "is written in flow style; not edited in place",
        ),
    ] {
        assert_eq!(refused(path, value), format!("{refused_at}: {why}"));
    }
    let listed = "hosts:\n  - name: a\n    tag: v1\n";
    let error = YamlDoc::parse(listed)
        .unwrap()
        .set(&keys("hosts.name"), &json!("b"))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "hosts: is a list; list items are not edited"
    );
    let two = "a: 1\n---\na: 2\n";
    assert!(
        YamlDoc::parse(two).is_err(),
        "two documents are not one values file"
    );
}

#[test]
fn line_endings_and_a_missing_final_newline_are_kept() {
    let crlf = "image:\r\n  tag: v1\r\n  name: shop\r\n";
    let mut doc = YamlDoc::parse(crlf).unwrap();
    doc.set(&keys("image.tag"), &json!("v2")).unwrap();
    doc.set(&keys("image.extra"), &json!("x")).unwrap();
    assert_eq!(
        doc.text(),
        "image:\r\n  tag: v2\r\n  name: shop\r\n  extra: x\r\n"
    );
    let mut bare = YamlDoc::parse("image:\n  tag: v1").unwrap();
    bare.set(&keys("image.tag"), &json!("v22")).unwrap();
    assert_eq!(bare.text(), "image:\n  tag: v22");
    bare.set(&keys("image.more"), &json!(1)).unwrap();
    assert_eq!(bare.text(), "image:\n  tag: v22\n  more: 1\n");
    let mut empty = YamlDoc::parse("").unwrap();
    empty.set(&keys("image.tag"), &json!("v1")).unwrap();
    assert_eq!(empty.text(), "image:\n  tag: v1\n");
}

#[test]
fn a_key_with_no_value_gets_one_and_keeps_its_comment() {
    let mut doc = YamlDoc::parse("tag: # set by the release\nother:\n").unwrap();
    assert_eq!(doc.value()["tag"], Value::Null);
    doc.set(&keys("tag"), &json!("v3")).unwrap();
    doc.set(&keys("other"), &json!("o")).unwrap();
    assert_eq!(doc.text(), "tag: v3 # set by the release\nother: o\n");
}

#[test]
fn quoted_keys_are_found_and_bad_yaml_names_its_line() {
    let mut doc = YamlDoc::parse("\"app.kubernetes.io/name\": shop\n'it''s': 1\n").unwrap();
    doc.set(&["app.kubernetes.io/name".to_string()], &json!("cart"))
        .unwrap();
    doc.set(&["it's".to_string()], &json!(2)).unwrap();
    assert_eq!(doc.text(), "\"app.kubernetes.io/name\": cart\n'it''s': 2\n");
    let error = YamlDoc::parse("image:\n  tag: [v1\n").unwrap_err();
    assert!(
        matches!(error, YamlEditError::Syntax { line, .. } if line >= 2),
        "{error}"
    );
}

#[test]
fn plain_strings_are_quoted_only_when_a_reader_would_retype_them() {
    for plain in [
        "v1.2.3",
        "1.25.4-debian-12-r1",
        "latest",
        "sha256:4f2a",
        "a b",
    ] {
        assert!(plain_safe(plain), "{plain}");
    }
    for quoted in [
        "",
        "1.10",
        "10",
        "0x1F",
        "1e3",
        "2024-01-01",
        "12:30",
        "yes",
        "No",
        "ON",
        "null",
        "~",
        " lead",
        "a: b",
        "a #b",
        "-x",
        "*ref",
        "{x}",
        "true",
    ] {
        assert!(!plain_safe(quoted), "{quoted:?}");
    }
}

/// Bad input never panics: every prefix of the values file, and the file with awkward text
/// spliced in at every line start, either refuses the edit (text untouched) or makes one that
/// reads back as set.
#[test]
fn truncated_and_mangled_files_are_refused_or_edited_never_a_panic() {
    let inserts = [
        "\"\\",
        "'",
        "\"k\\u00e9\": 1\n",
        "- ",
        ": ",
        "? x\n",
        "a: |\n",
        "&a ",
        "*a\n",
        "\t",
        "é: \"\\é\"\n",
        "{",
        "#",
        "---\n",
        "image: ",
    ];
    let mut texts: Vec<String> = VALUES
        .char_indices()
        .map(|(i, _)| VALUES[..i].to_string())
        .collect();
    for (at, _) in VALUES.match_indices('\n') {
        for insert in inserts {
            texts.push(format!("{}{insert}{}", &VALUES[..=at], &VALUES[at + 1..]));
        }
    }
    let paths = [
        "image.tag",
        "replicaCount",
        "image.new.key",
        "name",
        "resources.cpu",
    ];
    for text in &texts {
        let Ok(doc) = YamlDoc::parse(text) else {
            continue;
        };
        for path in paths {
            let mut copy = doc.clone();
            match copy.set(&keys(path), &json!("1.2")) {
                Ok(_) => assert_eq!(
                    get_keys(copy.value(), &keys(path)),
                    Some(&json!("1.2")),
                    "{path} in {text:?}"
                ),
                Err(_) => assert_eq!(copy.text(), text.as_str()),
            }
        }
    }
}

#[test]
fn a_key_line_cut_inside_an_escape_is_not_a_key() {
    assert_eq!(split_key("\"\\"), None);
    assert_eq!(split_key("\"\\é\": 1"), None);
    assert_eq!(split_key("\"a\\tb\": 1"), Some(("a\tb".to_string(), 7)));
}
