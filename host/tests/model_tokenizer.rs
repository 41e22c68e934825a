//! Tokenizer round trips, streaming detokenization and chat-template
//! rendering against what Hugging Face transformers produced for the fixtures.

#[path = "support/model/mod.rs"]
mod support;

use minisgl::model::{IncrementalDecoder, Tokenizer};
use support::*;

fn tokenizer(name: &str) -> Tokenizer {
    let m = minisgl::model::load(&fixture(name)).expect("fixture loads");
    m.tokenizer.expect("fixture has a tokenizer")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// One llama-style (BOS added, llama3-like template in tokenizer_config.json)
/// and one ChatML-style (no BOS, chat_template.jinja) fixture.
const TOKENIZER_MODELS: &[&str] = &["llama_gqa_tied", "qwen3"];

#[test]
fn encode_decode_match_hf() {
    for name in TOKENIZER_MODELS {
        let tok = tokenizer(name);
        let r = reference(name);
        for case in r.json["tokenizer"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            assert_eq!(
                tok.encode(text, true).unwrap(),
                ids(&case["ids"]),
                "{name}: encode {text:?}"
            );
            let plain = ids(&case["ids_no_special"]);
            assert_eq!(
                tok.encode(text, false).unwrap(),
                plain,
                "{name}: encode {text:?} w/o specials"
            );
            assert_eq!(
                tok.decode(&plain, false).unwrap(),
                case["decoded"].as_str().unwrap(),
                "{name}: decode"
            );
            assert_eq!(
                tok.decode(&ids(&case["ids"]), true).unwrap(),
                case["decoded_skip_special"].as_str().unwrap(),
                "{name}: decode skipping specials"
            );
        }
    }
}

#[test]
fn streaming_decode_equals_full_decode() {
    let tok = tokenizer("qwen3");
    let r = reference("qwen3");
    for case in r.json["tokenizer"].as_array().unwrap() {
        let all = ids(&case["ids_no_special"]);
        // Stream after a 2-token "prompt" so context effects are exercised.
        let split = all.len().min(2);
        let mut dec = IncrementalDecoder::new(&all[..split], false);
        let mut text = String::new();
        for &id in &all[split..] {
            let piece = dec.push(&tok, id).unwrap();
            assert!(!piece.contains('\u{FFFD}'), "split a character: {piece:?}");
            text.push_str(&piece);
        }
        text.push_str(&dec.flush(&tok).unwrap());
        // A context cut mid-character shows as U+FFFD; the stream completes it.
        let prefix = tok
            .decode(&all[..split], false)
            .unwrap()
            .trim_end_matches('\u{FFFD}')
            .to_string();
        let full = tok.decode(&all, false).unwrap();
        assert_eq!(format!("{prefix}{text}"), full, "case {:?}", case["text"]);
    }
}

#[test]
fn chat_templates_match_hf() {
    for name in TOKENIZER_MODELS {
        let tok = tokenizer(name);
        assert!(tok.has_chat_template());
        let r = reference(name);
        let mut rendered = 0;
        for case in r.json["chat"].as_array().unwrap() {
            let agp = case["add_generation_prompt"].as_bool().unwrap();
            let got = tok.apply_chat_template(&case["messages"], agp);
            match case.get("error") {
                Some(err) => {
                    let e = got.expect_err("HF's template raised here");
                    assert!(e.to_string().contains(err.as_str().unwrap()), "{name}: {e}");
                }
                None => {
                    let text = got.unwrap();
                    assert_eq!(
                        text,
                        case["text"].as_str().unwrap(),
                        "{name}: {:?}",
                        case["messages"]
                    );
                    assert_eq!(tok.encode(&text, false).unwrap(), ids(&case["ids"]));
                    rendered += 1;
                }
            }
        }
        assert!(rendered >= 2, "{name}: too few rendered cases");
    }
}

#[test]
fn eos_ids_come_from_config_and_tokenizer() {
    let tok = tokenizer("qwen3");
    let im_end = tok.token_to_id("<|im_end|>").unwrap();
    assert!(tok.is_eos(im_end));
    assert_eq!(tok.bos_id(), None);
    let tok = tokenizer("llama_gqa_tied");
    assert!(tok.is_eos(tok.token_to_id("<|eot_id|>").unwrap()));
    assert_eq!(tok.bos_id(), tok.token_to_id("<|begin_of_text|>"));
}
