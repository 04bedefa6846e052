//! The simulated dispatch policies: the policy crate's one enum
//! ([`tailtrim_policy::dispatch::DispatchPolicy`]), under the name the simulator has always
//! used. Flag spellings are its `name()`s; `memcached` also means `pinned`.

pub use tailtrim_policy::dispatch::DispatchPolicy as Policy;

#[cfg(test)]
mod tests {
    use super::Policy;

    #[test]
    fn names_round_trip() {
        for policy in Policy::ALL {
            assert_eq!(policy.name().parse::<Policy>().ok(), Some(policy));
        }
        assert_eq!("MEMCACHED".parse::<Policy>().ok(), Some(Policy::Pinned));
        assert!("minos".parse::<Policy>().is_err());
        assert_eq!(Policy::LateBinding.worker_cores(8), 7);
        assert_eq!(Policy::SizeAware.worker_cores(8), 8);
    }
}
