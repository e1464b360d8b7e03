//! The device layer's own transfers against the host's bytes (skipped without a GPU).

mod common;

use keisan::device::cuda::STAGE_BYTES;
use rand::Rng;

/// `Gpu::download` gives back what was uploaded: small arrays by the driver's copy, large
/// ones through its two page-locked buffers (chunk counts odd and even, a last chunk
/// short or whole), and views that start inside an array.
#[test]
fn downloads_give_back_the_device_bytes() {
    let Some(keisan::device::Device::Cuda(gpu)) =
        common::gpu_or_skip("device downloads_give_back_the_device_bytes")
    else {
        return;
    };
    let mut rng = common::rng();
    let per = STAGE_BYTES / 4;
    for n in [
        0,
        1,
        per - 1,
        per,
        per + 1,
        2 * per,
        3 * per - 7,
        4 * per + 5,
    ] {
        let host: Vec<f32> = (0..n).map(|_| rng.random::<f32>()).collect();
        let dev = gpu.stream.clone_htod(&host).unwrap();
        let back = gpu
            .download(&dev.as_view())
            .unwrap_or_else(|e| panic!("{n} values: {e}"));
        assert!(back == host, "{n} values");
        if n > 3 {
            let part = gpu
                .download(&dev.slice(3..n))
                .unwrap_or_else(|e| panic!("{n} values from 3: {e}"));
            assert!(part[..] == host[3..], "{n} values from 3");
        }
    }
    let host: Vec<f64> = (0..STAGE_BYTES / 8 * 5 / 2).map(|_| rng.random()).collect();
    let dev = gpu.stream.clone_htod(&host).unwrap();
    let back = gpu
        .download(&dev.as_view())
        .unwrap_or_else(|e| panic!("f64: {e}"));
    assert!(back == host, "f64");
}

/// `Gpu::upload` and `Gpu::upload_into` put the host's values on the device (read back by
/// the driver's own copy): small arrays directly, large ones through the page-locked
/// buffers, and into a part of a larger array without touching the rest.
#[test]
fn uploads_put_the_host_bytes_on_the_device() {
    let Some(keisan::device::Device::Cuda(gpu)) =
        common::gpu_or_skip("device uploads_put_the_host_bytes_on_the_device")
    else {
        return;
    };
    let mut rng = common::rng();
    let per = STAGE_BYTES / 4;
    for n in [1, per - 1, per, per + 1, 2 * per, 3 * per - 7, 4 * per + 5] {
        let host: Vec<f32> = (0..n).map(|_| rng.random::<f32>()).collect();
        let dev = gpu
            .upload(&host)
            .unwrap_or_else(|e| panic!("{n} values: {e}"));
        assert!(gpu.stream.clone_dtoh(&dev).unwrap() == host, "{n} values");
        let mut wide = gpu.stream.alloc_zeros::<f32>(n + 10).unwrap();
        gpu.upload_into(&host, &mut wide.slice_mut(3..n + 3))
            .unwrap_or_else(|e| panic!("{n} values at 3: {e}"));
        let back = gpu.stream.clone_dtoh(&wide).unwrap();
        assert!(back[3..n + 3] == host[..], "{n} values at 3");
        assert!(back[..3].iter().chain(&back[n + 3..]).all(|&v| v == 0.0));
    }
    let host: Vec<f64> = (0..STAGE_BYTES / 8 * 5 / 2).map(|_| rng.random()).collect();
    let dev = gpu.upload(&host).unwrap();
    assert!(gpu.stream.clone_dtoh(&dev).unwrap() == host, "f64");
}
