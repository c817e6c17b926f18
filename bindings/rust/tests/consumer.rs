// The crate against a bundle: PT2RT_TEST_PACKAGES (tests/cpp/export_packages.py's output) and PT2RT_TEST_OPS (the
// ops library). Prints the checksum of 60 frames of the example model for tests/c_api/consumers_test.sh.
use std::thread;

fn packages() -> String {
    std::env::var("PT2RT_TEST_PACKAGES").expect("set PT2RT_TEST_PACKAGES")
}
fn ops() -> String {
    std::env::var("PT2RT_TEST_OPS").expect("set PT2RT_TEST_OPS")
}

fn frame(f: usize) -> Vec<f32> {
    (0..3 * 32 * 32).map(|i| (0.001 * (i + f) as f64).sin() as f32).collect()
}

#[test]
fn errors_carry_status_and_message() {
    let ops = ops();
    let e = pt2rt::Runtime::load(&format!("{}/no-such.pt2", packages()), &[&ops], 0).err().unwrap();
    assert_eq!(e.status, pt2rt::Status::Package);
    assert!(e.message.contains("no-such.pt2"), "{}", e.message);
    let e = pt2rt::Runtime::load(&format!("{}/op_static.pt2", packages()), &["/nonexistent/libnothing.so"], 0)
        .err()
        .unwrap();
    assert_eq!(e.status, pt2rt::Status::OpsLibrary);

    let rt = pt2rt::Runtime::load(&format!("{}/op_static.pt2", packages()), &[&ops], 0).unwrap();
    let info = &rt.inputs().unwrap()[0];
    assert_eq!((info.name.as_str(), info.dtype), ("x", pt2rt::DType::Float32));
    let n: i64 = info.shape.iter().product();
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let out = rt.run(&[pt2rt::Input::f32(&x, &info.shape)]).unwrap();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &x[..]); // the identity, exactly
    assert!(out[0].as_slice::<f64>().is_err());
    let mut bad = info.shape.clone();
    bad[2] += 1;
    let e = rt.run(&[pt2rt::Input::f32(&x, &bad)]).err().unwrap();
    assert_eq!(e.status, pt2rt::Status::Usage); // the slice does not hold what the shape claims
    let more = vec![0f32; (n / info.shape[2] * bad[2]) as usize];
    let e = rt.run(&[pt2rt::Input::f32(&more, &bad)]).err().unwrap();
    assert_eq!(e.status, pt2rt::Status::Input, "{}", e.message);
}

#[test]
fn example_model_from_threads_and_its_checksum() {
    let rt = pt2rt::Runtime::load(&format!("{}/net_dynamic.pt2", packages()), &[&ops()], 2).unwrap();
    let shape = [1i64, 3, 32, 32];
    let x = frame(7);
    let expected = rt.run(&[pt2rt::Input::f32(&x, &shape)]).unwrap()[0].as_slice::<f32>().unwrap().to_vec();
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    let out = rt.run(&[pt2rt::Input::f32(&x, &shape)]).unwrap();
                    let y = out[0].as_slice::<f32>().unwrap();
                    assert!(y.iter().zip(&expected).all(|(a, b)| (a - b).abs() <= 1e-5 * (1.0 + b.abs())));
                }
            });
        }
    });
    let mut checksum = 0f64;
    for f in 0..60 {
        let out = rt.run(&[pt2rt::Input::f32(&frame(f), &shape)]).unwrap();
        checksum += out[0].as_slice::<f32>().unwrap().iter().map(|&v| v as f64).sum::<f64>();
    }
    println!("checksum {checksum:.9}");
}

#[test]
fn options_memory_and_run_into() {
    let bytes = std::fs::read(format!("{}/net_dynamic.pt2", packages())).unwrap();
    let options = pt2rt::Options {
        cpu_isa: Some("default".into()),
        num_runners: 2,
        ops_libraries: vec![ops()],
        reuse_run_memory: true,
        intra_op_threads: 1,
        ..Default::default()
    };
    let bad = pt2rt::Options { intra_op_threads: -1, ..Default::default() };
    let err = pt2rt::Runtime::load_from_memory(&bytes, &bad).err().expect("-1 intra-op threads loaded");
    assert!(err.to_string().contains("intra_op_threads"), "{err}");
    let rt = pt2rt::Runtime::load_from_memory(&bytes, &options).unwrap();
    drop(bytes);
    let shape = [1i64, 3, 32, 32];
    let out_shape = [1i64, 8, 32, 32];
    let x = frame(3);
    let expected = rt.run(&[pt2rt::Input::f32(&x, &shape)]).unwrap()[0].as_slice::<f32>().unwrap().to_vec();
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut y = vec![0f32; 8 * 32 * 32];
                for _ in 0..10 {
                    rt.run_into(&[pt2rt::Input::f32(&x, &shape)], &mut [pt2rt::Output::f32(&mut y, &out_shape)])
                        .unwrap();
                    assert_eq!(y, expected);
                    y.iter_mut().for_each(|v| *v = 0.0);
                }
            });
        }
    });
    // buffers that do not fit: nothing written
    let mut y = vec![-1f32; 8 * 32 * 32];
    let e = rt.run_into(&[pt2rt::Input::f32(&x, &shape)], &mut [pt2rt::Output::f32(&mut y[..100], &out_shape)]);
    assert_eq!(e.err().unwrap().status, pt2rt::Status::Usage);
    let mut y2 = vec![-1f32; 2 * 8 * 32 * 32];
    let e = rt.run_into(&[pt2rt::Input::f32(&x, &shape)], &mut [pt2rt::Output::f32(&mut y2, &[2, 8, 32, 32])]).err().unwrap();
    assert_eq!(e.status, pt2rt::Status::Usage);
    assert!(e.message.contains("nothing was written"), "{}", e.message);
    assert!(y2.iter().all(|&v| v == -1.0));
    let e = rt.run_into(&[pt2rt::Input::f32(&x, &shape)], &mut []).err().unwrap();
    assert_eq!(e.status, pt2rt::Status::Usage);
    drop(rt);

    let e = pt2rt::Runtime::load_from_memory(b"not a package", &options).err().unwrap();
    assert_eq!(e.status, pt2rt::Status::Package);
    assert!(e.message.contains("the package in memory (13 bytes)"), "{}", e.message);
    let e = pt2rt::Runtime::load_from_memory(&[], &pt2rt::Options { num_runners: 0, ..Default::default() }).err().unwrap();
    assert_eq!(e.status, pt2rt::Status::Usage);
    let e = pt2rt::Runtime::load_with_options(
        &format!("{}/op_static.pt2", packages()),
        &pt2rt::Options { cpu_isa: Some("no_such_isa".into()), ops_libraries: vec![ops()], ..Default::default() },
    )
    .err()
    .unwrap();
    assert_eq!(e.status, pt2rt::Status::Package);
    assert!(e.message.contains("no_such_isa"), "{}", e.message);
    let rt = pt2rt::Runtime::load_with_options(
        &format!("{}/op_static.pt2", packages()),
        &pt2rt::Options { ops_libraries: vec![ops()], keep_package_open: false, ..Default::default() },
    )
    .unwrap();
    assert_eq!(rt.num_outputs(), 1);
}
