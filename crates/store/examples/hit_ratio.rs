//! Hit ratio of the store under a fixed byte budget on a zipf(0.99) trace with ETC-like value
//! sizes, replayed directly against the store: each request is a `get`; a miss is followed by
//! a `set` of the key's value (a cache-aside client). Prints one line per budget.
//!
//! ```sh
//! cargo run --profile suite -p tailtrim-store --example hit_ratio -- [keys] [requests] [MiB...]
//! ```
//!
//! Value sizes follow the generalized Pareto fit of Facebook's ETC pool (Atikoglu et al.,
//! SIGMETRICS '12: location 0, scale 214.476, shape 0.348238), clamped to 1 B … 8 KiB, fixed
//! per key; keys are 16 bytes. Virtual time advances one second per 100,000 requests.

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use tailtrim_store::{Expiry, Store, StoreConfig, UnixSecs};

const ZIPF_EXPONENT: f64 = 0.99;
const ETC_SCALE: f64 = 214.476;
const ETC_SHAPE: f64 = 0.348238;
const VALUE_MAX: usize = 8 * 1024;
const REQUESTS_PER_SECOND: u64 = 100_000;
const START: u64 = 1_700_000_000;

fn value_len(key: u64, seed: u64) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ key.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let uniform: f64 = rng.gen_range(0.0..1.0);
    let len = ETC_SCALE / ETC_SHAPE * ((1.0 - uniform).powf(-ETC_SHAPE) - 1.0);
    (len.round() as usize).clamp(1, VALUE_MAX)
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|arg| arg.parse().expect("numeric arguments"))
        .collect();
    let keys = args.first().copied().unwrap_or(1_000_000);
    let requests = args.get(1).copied().unwrap_or(5_000_000);
    let budgets: Vec<u64> = if args.len() > 2 {
        args[2..].to_vec()
    } else {
        vec![16, 32, 64]
    };
    let zipf = Zipf::new(keys, ZIPF_EXPONENT).expect("valid zipf parameters");
    let filler = Bytes::from(vec![b'v'; VALUE_MAX]);
    for budget in budgets {
        let store = Store::new(StoreConfig {
            max_bytes: budget * 1024 * 1024,
            ..StoreConfig::default()
        })
        .expect("valid store configuration");
        let mut rng = ChaCha8Rng::seed_from_u64(29);
        let (mut hits, mut counted) = (0u64, 0u64);
        // The first fifth of the trace warms the cache and is not counted.
        let warmup = requests / 5;
        for request in 0..requests {
            let key_id = zipf.sample(&mut rng) as u64;
            let key = format!("key:{key_id:012}");
            let now = UnixSecs(START + request / REQUESTS_PER_SECOND);
            let hit = store.get(key.as_bytes(), now).is_some();
            if !hit {
                let value = filler.slice(..value_len(key_id, 7));
                store
                    .set(key.as_bytes(), value, 0, Expiry::Never, now)
                    .expect("a set within the item size limit");
            }
            if request >= warmup {
                counted += 1;
                hits += u64::from(hit);
            }
        }
        let stats = store.stats();
        println!(
            "budget_mib={budget} keys={keys} requests={requests} hit_ratio={:.4} items={} evictions={}",
            hits as f64 / counted as f64,
            stats.curr_items,
            stats.evictions
        );
    }
}
