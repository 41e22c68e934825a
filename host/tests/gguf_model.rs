//! Loading the tiny GGUF models end to end: config, tensors (names, shapes,
//! values, llama.cpp's Q/K permutation undone) and tokenizer, each checked
//! against what Hugging Face transformers loads from the same file
//! (tests/fixtures/gguf/tiny_models.json, written by scripts/gguf_fixtures.py).

use std::path::PathBuf;

use minisgl::model::gguf::{load, GgufModel};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gguf")
        .join(name)
}

fn reference() -> Value {
    serde_json::from_slice(&std::fs::read(fixture("tiny_models.json")).unwrap()).unwrap()
}

fn check_tensors(arch: &str, model: &GgufModel, samples: &Value) {
    let tied = model.config["tie_word_embeddings"].as_bool().unwrap();
    let samples = samples.as_object().unwrap();
    for (name, s) in samples {
        if name == "lm_head.weight" && tied {
            assert!(
                !model.tensors.contains_key(name),
                "{arch}: tied lm_head returned"
            );
            continue;
        }
        let t = model
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("{arch}: {name} missing"));
        let shape: Vec<usize> = s["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape, shape, "{arch}: {name} shape");
        assert_eq!(t.data.len(), shape.iter().product::<usize>());
        let idx = s["index"].as_array().unwrap();
        let vals = s["values"].as_array().unwrap();
        for (i, v) in idx.iter().zip(vals) {
            let (i, v) = (i.as_u64().unwrap() as usize, v.as_f64().unwrap() as f32);
            let g = t.data[i];
            assert!(
                (g - v).abs() <= 1e-6 * v.abs().max(1.0),
                "{arch}: {name}[{i}] = {g}, transformers has {v}"
            );
        }
        let sum: f64 = t.data.iter().map(|&x| x as f64).sum();
        let abs_sum: f64 = t.data.iter().map(|&x| (x as f64).abs()).sum();
        let want_abs = s["abs_sum"].as_f64().unwrap();
        assert!(
            (sum - s["sum"].as_f64().unwrap()).abs() <= 1e-6 * want_abs.max(1.0),
            "{arch}: {name} sum {sum}"
        );
        assert!(
            (abs_sum - want_abs).abs() <= 1e-6 * want_abs.max(1.0),
            "{arch}: {name} abs sum {abs_sum} vs {want_abs}"
        );
    }
    let expected = samples.len() - usize::from(tied);
    assert_eq!(model.tensors.len(), expected, "{arch}: tensor count");
}

fn check_config(arch: &str, model: &GgufModel, want: &Value) {
    let c = &model.config;
    for key in [
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "max_position_embeddings",
        "vocab_size",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
    ] {
        assert_eq!(c[key], want[key], "{arch}: config {key}");
    }
    for key in ["rms_norm_eps", "rope_theta"] {
        let (g, w) = (c[key].as_f64().unwrap(), want[key].as_f64().unwrap());
        assert!((g - w).abs() <= 1e-6 * w, "{arch}: {key} {g} vs {w}");
    }
    // transformers leaves head_dim unset for qwen2 (derived) and ignores the
    // file's key_length for qwen3 (the fixture script overrides it); compare
    // with the value the model actually has.
    let head_dim = want["head_dim"].as_u64().unwrap_or_else(|| {
        want["hidden_size"].as_u64().unwrap() / want["num_attention_heads"].as_u64().unwrap()
    });
    assert_eq!(c["head_dim"].as_u64(), Some(head_dim), "{arch}: head_dim");
    let class = match arch {
        "llama" => "LlamaForCausalLM",
        "qwen2" => "Qwen2ForCausalLM",
        "qwen3" => "Qwen3ForCausalLM",
        _ => unreachable!(),
    };
    assert_eq!(c["architectures"], serde_json::json!([class]));
    assert_eq!(c["torch_dtype"], "float32");
}

fn check_tokenizer(arch: &str, model: &GgufModel, cases: &Value, hf_ids: &Value) {
    for (text, case) in cases.as_object().unwrap() {
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let enc = model.tokenizer.encode(text.as_str(), true).unwrap();
        assert_eq!(enc.get_ids(), want.as_slice(), "{arch}: ids of {text:?}");
        let hf: Vec<u32> = hf_ids[text.as_str()]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(
            enc.get_ids(),
            hf.as_slice(),
            "{arch}: transformers ids of {text:?}"
        );
        let decoded = model.tokenizer.decode(&want, false).unwrap();
        assert_eq!(decoded, case["decoded"].as_str().unwrap(), "{arch}: decode");
        assert_eq!(&decoded, text, "{arch}: round trip");
    }
    // Control tokens are matched whole and skipped on request.
    let enc = model
        .tokenizer
        .encode("<|im_start|>user<|im_end|>", false)
        .unwrap();
    assert_eq!(enc.get_ids()[0], 1);
    assert_eq!(*enc.get_ids().last().unwrap(), 2);
    assert_eq!(model.tokenizer.decode(enc.get_ids(), true).unwrap(), "user");
    assert_eq!(model.bos_token.as_deref(), Some("<|im_start|>"));
    assert_eq!(model.eos_token.as_deref(), Some("<|im_end|>"));
    let template = model.chat_template.as_deref().unwrap();
    assert!(template.starts_with("{% for message in messages %}"));
}

#[test]
fn tiny_models_match_transformers() {
    let r = reference();
    for arch in ["llama", "qwen3", "qwen2"] {
        let m = &r["models"][arch];
        let model = load(&fixture(m["file"].as_str().unwrap())).unwrap();
        check_config(arch, &model, &m["transformers_config"]);
        // transformers' GGUF loader drops rope scaling for these
        // architectures; the fixture records what the file was written from.
        assert_eq!(
            model.config["rope_scaling"], m["rope_scaling"],
            "{arch}: rope_scaling"
        );
        check_tensors(arch, &model, &m["transformers_tensors"]);
        check_tokenizer(
            arch,
            &model,
            &r["tokenizer_cases"],
            &m["transformers_tokenizer_ids"],
        );
    }
}

#[test]
fn qwen_specific_tensors_and_keys() {
    let q3 = load(&fixture("tiny_qwen3.gguf")).unwrap();
    assert!(q3
        .tensors
        .contains_key("model.layers.0.self_attn.q_norm.weight"));
    assert_eq!(q3.config["head_dim"], 32);
    assert_eq!(q3.config["hidden_size"], 64);
    let q2_file = minisgl::model::gguf::GgufFile::open(&fixture("tiny_qwen2.gguf")).unwrap();
    assert_eq!(q2_file.alignment, 64, "general.alignment");
    assert_eq!(q2_file.data_offset % 64, 0);
    let q2 = load(&fixture("tiny_qwen2.gguf")).unwrap();
    for b in ["q_proj", "k_proj", "v_proj"] {
        let t = &q2.tensors[&format!("model.layers.0.self_attn.{b}.bias")];
        assert_eq!(t.shape.len(), 1);
    }
    let llama = load(&fixture("tiny_llama.gguf")).unwrap();
    assert_eq!(llama.config["attention_bias"], false);
    assert_eq!(llama.config["model_type"], "llama");
}

/// Llama-3 rope scaling, which llama.cpp stores as per-dimension divisors
/// (`rope_freqs.weight`), comes back as the HF `rope_scaling` it was made from.
#[test]
fn llama3_rope_scaling_from_rope_freqs() {
    let r = reference();
    let want = &r["llama3_rope"];
    let path = fixture(want["file"].as_str().unwrap());
    let model = load(&path).unwrap();
    assert_eq!(model.config["rope_scaling"], want["rope_scaling"]);
    assert_eq!(model.config["rope_theta"], want["rope_theta"]);
    assert_eq!(model.config["head_dim"], want["head_dim"]);
    assert!(!model.tensors.keys().any(|k| k.contains("rope")));

    // Divisors that no Llama-3 setting produces are refused, not ignored.
    let file = minisgl::model::gguf::GgufFile::open(&path).unwrap();
    let info = file.tensor("rope_freqs.weight").unwrap();
    let at = (file.data_offset + info.offset) as usize + 4 * 4; // entry 4: the smoothed band
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at..at + 4].copy_from_slice(&3.5f32.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad_rope.gguf");
    std::fs::write(&bad, bytes).unwrap();
    let msg = load(&bad).unwrap_err().to_string();
    assert!(
        msg.contains("rope_freqs.weight") && msg.contains("entry 4"),
        "{msg}"
    );
}

/// A SentencePiece-style vocabulary (`tokenizer.ggml.model = "llama"`: tokens,
/// scores, byte tokens, no merges) tokenizes like the tokenizer transformers
/// builds from the same file.
#[test]
fn sentencepiece_vocabulary_matches_transformers() {
    let r = reference();
    let spm = &r["spm"];
    let model = load(&fixture(spm["file"].as_str().unwrap())).unwrap();
    assert_eq!(model.bos_token.as_deref(), spm["bos_token"].as_str());
    assert_eq!(model.eos_token.as_deref(), spm["eos_token"].as_str());
    for (text, case) in spm["transformers_tokenizer_cases"].as_object().unwrap() {
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let enc = model.tokenizer.encode(text.as_str(), true).unwrap();
        assert_eq!(enc.get_ids(), want.as_slice(), "ids of {text:?}");
        let plain = model.tokenizer.decode(&want, true).unwrap();
        assert_eq!(
            plain,
            case["decoded_skip_special"].as_str().unwrap(),
            "decode of {text:?}"
        );
    }
}
