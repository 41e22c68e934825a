//! Loading failures give clear errors that name the problem.

#[path = "support/model/mod.rs"]
mod support;

use std::path::Path;

use minisgl::model::{load, load_random, ModelConfig};
use support::*;

/// Copy a fixture into a temp dir so it can be damaged.
fn copy_fixture(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    dir
}

fn err_of(path: &Path) -> String {
    match load(path) {
        Ok(_) => panic!("{} loaded but should not", path.display()),
        Err(e) => e.to_string(),
    }
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(v.as_object_mut().unwrap());
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn missing_path_and_files() {
    let e = err_of(Path::new("/nonexistent/model"));
    assert!(
        e.contains("/nonexistent/model") && e.contains("does not exist"),
        "{e}"
    );

    let d = copy_fixture("qwen2");
    std::fs::remove_file(d.path().join("config.json")).unwrap();
    let e = err_of(d.path());
    assert!(e.contains("config.json"), "{e}");

    let d = copy_fixture("qwen2");
    std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
    let e = err_of(d.path());
    assert!(e.contains("safetensors"), "{e}");
}

#[test]
fn unsupported_architecture_is_named() {
    let d = copy_fixture("qwen2");
    edit_config(d.path(), |c| {
        c.insert(
            "architectures".into(),
            serde_json::json!(["GPT2LMHeadModel"]),
        );
    });
    let e = err_of(d.path());
    assert!(e.contains("GPT2LMHeadModel"), "{e}");
}

#[test]
fn missing_config_keys_are_named() {
    for key in [
        "hidden_size",
        "num_hidden_layers",
        "vocab_size",
        "architectures",
        "intermediate_size",
    ] {
        let d = copy_fixture("llama_gqa_tied");
        edit_config(d.path(), |c| {
            c.remove(key);
        });
        let e = err_of(d.path());
        assert!(e.contains(key) && e.contains("missing"), "{key}: {e}");
    }
    let d = copy_fixture("llama_gqa_tied");
    edit_config(d.path(), |c| {
        c.get_mut("rope_scaling")
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("low_freq_factor");
    });
    let e = err_of(d.path());
    assert!(e.contains("rope_scaling.low_freq_factor"), "{e}");
}

#[test]
fn corrupt_and_truncated_safetensors() {
    let d = copy_fixture("qwen3");
    let p = d.path().join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 1000]).unwrap();
    let e = err_of(d.path());
    assert!(
        e.contains("corrupt or truncated") && e.contains("model.safetensors"),
        "{e}"
    );

    std::fs::write(&p, &bytes[..4]).unwrap();
    let e = err_of(d.path());
    assert!(e.contains("corrupt or truncated"), "{e}");

    let mut garbage = bytes.clone();
    garbage[8..40].copy_from_slice(&[b'x'; 32]);
    std::fs::write(&p, &garbage).unwrap();
    let e = err_of(d.path());
    assert!(e.contains("corrupt or truncated"), "{e}");
}

#[test]
fn missing_or_misshapen_tensor_is_named() {
    let d = copy_fixture("qwen3");
    edit_config(d.path(), |c| {
        c.insert("intermediate_size".into(), serde_json::json!(96));
    });
    let m = load(d.path()).unwrap();
    let e = minisgl::model::placement::cpu_runner(&m, 8, 4)
        .err()
        .expect("shape mismatch");
    assert!(
        e.to_string().contains("mlp.gate_proj.weight") && e.to_string().contains("shape"),
        "{e}"
    );

    let d = copy_fixture("qwen2");
    edit_config(d.path(), |c| {
        c.insert("tie_word_embeddings".into(), serde_json::json!(false));
    });
    let m = load(d.path()).unwrap();
    let e = minisgl::model::placement::cpu_runner(&m, 8, 4)
        .err()
        .expect("missing lm_head");
    assert!(e.to_string().contains("lm_head.weight"), "{e}");
}

#[test]
fn both_config_styles_parse_alike() {
    // llama_gqa_tied is written Hub style (rope_theta/rope_scaling/torch_dtype),
    // llama_bf16 transformers-5 style (rope_parameters/dtype); same rope.
    let hub = load(&fixture("llama_gqa_tied")).unwrap().config;
    let t5 = load(&fixture("llama_bf16")).unwrap().config;
    assert_eq!(hub.rope_scaling(), t5.rope_scaling());
    assert_eq!(hub.rope_theta(), t5.rope_theta());
    assert!(matches!(
        hub.rope_scaling(),
        minisgl::model::RopeScaling::Llama3 { .. }
    ));
    assert_eq!(hub.dtype(), Some(minisgl::model::config::ConfigDType::F32));
    assert_eq!(t5.dtype(), Some(minisgl::model::config::ConfigDType::BF16));
    let e = ModelConfig::from_json_str(
        r#"{"architectures":["LlamaForCausalLM"],"hidden_size":64,
        "num_attention_heads":4,"intermediate_size":8,"num_hidden_layers":1,"vocab_size":8,
        "rope_parameters":{"rope_type":"yarn","rope_theta":1.0}}"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("yarn"), "{e}");
}

#[test]
fn random_weights_run_and_are_deterministic() {
    use minisgl::model::runner::ModelRunner;
    let a = load_random(&fixture("qwen3"), 7).unwrap();
    let b = load_random(&fixture("qwen3").join("config.json"), 7).unwrap();
    let mut ra = minisgl::model::placement::cpu_runner(&a, 16, 4).unwrap();
    let mut rb = minisgl::model::placement::cpu_runner(&b, 16, 4).unwrap();
    let s = step(vec![seq(1, &[5, 6, 7, 8, 9], 0, &[3, 1], true)]);
    let la = ra.logits(&s).unwrap();
    let lb = rb.logits(&s).unwrap();
    assert_eq!(la, lb);
    assert!(la[0].iter().all(|x| x.is_finite()));
    let spread = la[0].iter().cloned().fold(f32::MIN, f32::max)
        - la[0].iter().cloned().fold(f32::MAX, f32::min);
    assert!(spread > 0.0);
    let e = load_random(Path::new("/nonexistent/cfg"), 0).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/cfg"), "{e}");
}

#[test]
fn gguf_file_or_directory_with_one_gguf() {
    use minisgl::model::runner::ModelRunner;
    let gguf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gguf/tiny_llama.gguf");
    let direct = load(&gguf).expect("a .gguf file loads");
    assert!(direct.tokenizer.is_some());
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(&gguf, d.path().join("model.gguf")).unwrap();
    let via_dir = load(d.path()).expect("a directory with one .gguf loads");
    assert_eq!(direct.config, via_dir.config);
    // It runs through the same model definition.
    let mut r = minisgl::model::placement::cpu_runner(&via_dir, 4, 4).unwrap();
    let l = r
        .logits(&step(vec![seq(1, &[1, 2, 3], 0, &[2], true)]))
        .unwrap();
    assert!(l[0].iter().all(|x| x.is_finite()));

    std::fs::copy(&gguf, d.path().join("other.gguf")).unwrap();
    let e = err_of(d.path());
    assert!(e.contains("2 .gguf files"), "{e}");

    let bad = d.path().join("broken.gguf");
    std::fs::write(&bad, b"GGUF\x03\x00\x00\x00truncated").unwrap();
    let e = err_of(&bad);
    assert!(e.contains("broken.gguf"), "{e}");
}
