//! Dequantisation of every supported ggml type against the reference values
//! `gguf.quants.dequantize` (the `gguf` Python package) produced for the same
//! bytes, and the GGUF metadata value types (scripts/gguf_fixtures.py writes
//! both fixtures).

use std::path::PathBuf;

use minisgl::model::gguf::dequant::dequantize;
use minisgl::model::gguf::{GgmlType, GgufError, GgufFile, MetadataValue};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gguf")
        .join(name)
}

#[test]
fn every_type_matches_python_reference() {
    let file = GgufFile::open(&fixture("quant_types.gguf")).unwrap();
    let refs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("quant_types.json")).unwrap()).unwrap();
    let refs = refs.as_object().unwrap();
    assert_eq!(refs.len(), 16, "one reference per type");
    for (name, r) in refs {
        let info = file
            .tensor(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(info.ggml_type.name(), r["type"].as_str().unwrap(), "{name}");
        let shape: Vec<usize> = r["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(info.shape(), shape, "{name} shape");
        let got = dequantize(
            name,
            info.ggml_type,
            file.tensor_bytes(info),
            info.n_elements() as usize,
        )
        .unwrap();
        let want: Vec<f32> = r["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(got.len(), want.len(), "{name} length");
        let mut worst = 0f32;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let err = (g - w).abs();
            assert!(
                err <= 1e-6 * w.abs().max(1.0),
                "{name}[{i}]: got {g}, python reference {w}"
            );
            worst = worst.max(err);
        }
        println!("{name}: {} values, max abs error {worst:e}", got.len());
    }
}

#[test]
fn unsupported_type_names_type_and_tensor() {
    let file = GgufFile::open(&fixture("quant_types.gguf")).unwrap();
    let info = file.tensor("q.IQ2_XXS").unwrap();
    assert_eq!(info.ggml_type, GgmlType::IQ2_XXS);
    let err = dequantize(
        &info.name,
        info.ggml_type,
        file.tensor_bytes(info),
        info.n_elements() as usize,
    )
    .unwrap_err();
    assert!(matches!(err, GgufError::UnsupportedTensorType { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("IQ2_XXS") && msg.contains("q.IQ2_XXS"),
        "{msg}"
    );
}

#[test]
fn wrong_byte_count_is_an_error() {
    let err = dequantize("t", GgmlType::Q4_0, &[0u8; 17], 32).unwrap_err();
    assert!(err.to_string().contains("need 18 bytes, got 17"), "{err}");
}

#[test]
fn every_metadata_value_type() {
    let file = GgufFile::open(&fixture("quant_types.gguf")).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.alignment, 32);
    let get = |k: &str| file.get(k).unwrap_or_else(|| panic!("{k} missing")).clone();
    use MetadataValue as V;
    assert_eq!(get("test.u8"), V::U8(200));
    assert_eq!(get("test.i8"), V::I8(-100));
    assert_eq!(get("test.u16"), V::U16(60000));
    assert_eq!(get("test.i16"), V::I16(-30000));
    assert_eq!(get("test.u32"), V::U32(4_000_000_000));
    assert_eq!(get("test.i32"), V::I32(-2_000_000_000));
    assert_eq!(get("test.f32"), V::F32(0.15625));
    assert_eq!(get("test.bool"), V::Bool(true));
    assert_eq!(get("test.string"), V::String("héllo wörld ✓".into()));
    assert_eq!(get("test.u64"), V::U64((1 << 63) + 5));
    assert_eq!(get("test.i64"), V::I64(-(1 << 62)));
    assert_eq!(get("test.f64"), V::F64(std::f64::consts::E));
    assert_eq!(get("general.architecture").as_str(), Some("llama"));

    let ints: Vec<i64> = get("test.array_i32")
        .as_array()
        .unwrap()
        .values
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(ints, [1, -2, 3]);
    let strs: Vec<String> = get("test.array_str")
        .as_array()
        .unwrap()
        .values
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(strs, ["a", "bc", ""]);
    let nested = get("test.array_nested");
    let outer = nested.as_array().unwrap();
    assert_eq!(outer.values.len(), 2);
    assert_eq!(outer.values[0].as_array().unwrap().values.len(), 2);
    assert_eq!(outer.values[1].as_array().unwrap().values.len(), 1);
}
