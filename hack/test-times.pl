#!/usr/bin/perl
# Copies a test binary's output and appends to each test's verdict line how
# long that test took ("test x ... ok [12.3s]"): libtest runs the tests one
# after another (--test-threads=1), so it is the time since the previous verdict.
use strict;
use warnings;
use Time::HiRes qw(time);
$| = 1;
my $last = time;
while (my $line = <STDIN>) {
  if ($line =~ /^test .* \.\.\. .*\b(ok|FAILED|ignored)\s*$/ || $line =~ /^(ok|FAILED)\s*$/) {
    my $now = time;
    chomp $line;
    printf "%s [%.1fs]\n", $line, $now - $last;
    $last = $now;
  } else {
    print $line;
  }
}
