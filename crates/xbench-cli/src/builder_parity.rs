//! The library's builders refuse a value with the same words as the flag's parser, so an
//! embedding program and a command-line user read the same message (issue 18).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use xbench::Test;

use crate::parse;

/// The parser's refusal of `text` and the builder's refusal, which must be the same.
#[track_caller]
fn same(
    cli: Result<impl std::fmt::Debug, String>,
    lib: Result<xbench::TestSpec, xbench::config::SpecError>,
) {
    let cli = cli.unwrap_err();
    let lib = lib.unwrap_err();
    assert_eq!(cli, lib.reason, "{}", lib.field);
}

#[test]
fn builders_refuse_in_the_flags_words() {
    let t = Test::throughput;
    let l = Test::latency;
    same(parse::streams("0"), t().streams(0).build());
    same(parse::streams("1025"), t().streams(1025).build());
    same(
        parse::positive_duration("0"),
        t().duration(Duration::ZERO).build(),
    );
    same(
        parse::interval("0.05"),
        t().interval(Duration::from_millis(50)).build(),
    );
    same(parse::block_len("0"), t().block_len(0).build());
    same(parse::block_len("100M"), t().block_len(100 << 20).build());
    same(parse::mss("87"), t().mss(87).build());
    same(parse::size("0"), t().bytes(0).build());
    same(parse::bitrate("0"), t().bitrate(0).build());
    same(parse::flows("0"), l().flows(0).build());
    same(parse::flows("65537"), l().flows(65537).build());
    same(parse::burst("1025"), l().burst(1025).build());
    same(parse::rate("2e7"), l().rate(2e7).build());
    same(parse::rate("0"), l().rate(0.0).build());
    same(parse::rr_sizes("0,1"), l().sizes(0, 1).build());
    same(
        parse::positive_duration("0"),
        l().rr_timeout(Duration::ZERO).build(),
    );
    same(
        parse::rr_sizes(&format!("1,{}", (16 << 20) + 1)),
        l().sizes(1, (16 << 20) + 1).build(),
    );
}

/// Every setting the library names in a refusal is a flag of `xbench client` or `xbench
/// server` under both of its names, so a message quoting `field.flag()` points at a real flag
/// and a suite key spelt `field.long()` is that flag's long name.
#[test]
fn every_field_the_library_names_is_a_flag_by_both_names() {
    use clap::CommandFactory;
    let cli = crate::cli::Cli::command();
    let args: Vec<&clap::Arg> = ["client", "server"]
        .iter()
        .flat_map(|name| cli.find_subcommand(name).unwrap().get_arguments())
        .collect();
    for &field in xbench::config::Field::ALL {
        let arg = args
            .iter()
            .find(|a| a.get_long() == Some(field.long()))
            .unwrap_or_else(|| panic!("no --{} for {field:?}", field.long()));
        if let Some(short) = field.flag().strip_prefix('-').filter(|s| s.len() == 1) {
            assert_eq!(arg.get_short().map(String::from).as_deref(), Some(short));
        }
    }
}
