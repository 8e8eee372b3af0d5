//! On/off settings read from `MXRS_*` environment variables.

/// Whether the variable `name` leaves a feature on (unset, empty, `1`, `on`, `true`, in any
/// case) or turns it off (`0`, `off`, `false`); any other value is an error whose reason names
/// the value and the accepted ones.
pub(crate) fn switch(name: &str) -> Result<bool, String> {
    match std::env::var(name) {
        Err(_) => Ok(true),
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "on" | "true" | "" => Ok(true),
            "0" | "off" | "false" => Ok(false),
            _ => Err(format!(
                "{v:?} is neither on (`1`, `on`, `true`) nor off (`0`, `off`, `false`)"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::switch;

    #[test]
    fn values_turn_a_switch_on_or_off_or_are_refused() {
        // A name no other test reads.
        let name = "MXRS_SWITCH_UNDER_TEST";
        std::env::remove_var(name);
        assert_eq!(switch(name), Ok(true), "unset");
        for (value, on) in [("1", true), ("On", true), (" true ", true), ("", true)]
            .into_iter()
            .chain([("0", false), ("OFF", false), ("false", false)])
        {
            std::env::set_var(name, value);
            assert_eq!(switch(name), Ok(on), "{value:?}");
        }
        std::env::set_var(name, "sometimes");
        let err = switch(name).unwrap_err();
        assert!(
            err.contains("\"sometimes\"") && err.contains("`off`"),
            "{err}"
        );
        std::env::remove_var(name);
    }
}
