#!/usr/bin/env bash
# unit.docs_links: the README and docs/ hold together (issue #51).
#   - README.md is at most 300 lines, with no issue numbers and no dated measurements outside
#     its picture (docs/ keeps the history);
#   - every relative link of README.md and docs/**/*.md names a file that exists, and every
#     #anchor (also in plain text, docs/x.md#anchor) a heading or <a id> of its page;
#   - every flag of every command's --help is documented on the command's page: run in
#     docs/configuration.md, export and mcp in docs/integrations.md, the others in
#     docs/commands.md;
#   - the README gives `sudo make run` and `make test`, and .ci/run runs `make test`.
# The binary: $STALLWATCH_BIN, else build/stallwatch. Prints every problem, exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${STALLWATCH_BIN:-build/stallwatch}
problems=0
problem() { echo "docs: $*" >&2; problems=$((problems + 1)); }

# The README, its picture left out (the picture is a real run: dates and times of day).
readme_text=$(awk '/^<!-- readme-picture:begin/ { skip = 1 } !skip { print } /^<!-- readme-picture:end -->$/ { skip = 0 }' README.md)
lines=$(wc -l < README.md)
[ "$lines" -le 300 ] || problem "README.md has $lines lines; at most 300 (move the reference to docs/)"
if grep -nE '(^|[^&[:alnum:]])#[0-9]+\b|\b[Ii]ssues? #?[0-9]+' <<< "$readme_text"; then
  problem "README.md names issues (above); their history belongs in docs/"
fi
if grep -nE '\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b' <<< "$readme_text"; then
  problem "README.md has dated measurements (above); they belong in docs/"
fi
grep -q 'sudo make run' README.md || problem "README.md does not give \`sudo make run\`"
grep -q 'make test' README.md || problem "README.md does not give \`make test\`"
grep -qE '^make test$' .ci/run || problem ".ci/run does not run \`make test\`, the README's test command"

# Links and anchors. GitHub's anchor of a heading: lower case, punctuation but - and _ dropped,
# spaces as -, a repeated one suffixed -1, -2, ...
link_problems=$(find README.md docs -name '*.md' -print0 | sort -z | xargs -0 perl -CSD -e '
  use strict; use warnings; use File::Basename; use File::Spec;
  my %anchors;
  sub anchors_of {
    my ($path) = @_;
    return $anchors{$path} if $anchors{$path};
    my %a; my %seen; my $fence = 0;
    open(my $fh, "<:encoding(UTF-8)", $path) or return undef;
    while (my $l = <$fh>) {
      if ($l =~ /^\s*```/) { $fence = !$fence; next; }
      next if $fence;
      while ($l =~ /<a\s+(?:id|name)="([^"]+)"/g) { $a{$1} = 1; }
      if ($l =~ /^#{1,6}\s+(.*?)\s*#*\s*$/) {
        my $s = lc $1;
        $s =~ s/[^\p{L}\p{M}\p{N}\p{Pc} -]//g;
        $s =~ s/ /-/g;
        my $n = $seen{$s}++;
        $a{$n ? "$s-$n" : $s} = 1;
      }
    }
    return $anchors{$path} = \%a;
  }
  for my $file (@ARGV) {
    open(my $fh, "<:encoding(UTF-8)", $file) or die "$file: $!";
    my $dir = dirname($file); my $fence = 0; my $n = 0;
    while (my $l = <$fh>) {
      $n++;
      if ($l =~ /^\s*```/) { $fence = !$fence; next; }
      next if $fence;
      my @refs;
      push @refs, [$1, 1] while $l =~ /\]\(([^)\s]+)\)/g;
      push @refs, [$1, 0] while $l =~ /(?<![\w\/.(])((?:\.\.\/)*(?:[\w.-]+\/)*[\w.-]+\.md#[\w-]+)/g;
      for my $r (@refs) {
        my ($t, $is_link) = @$r;
        next if $t =~ m{^(https?|mailto|file):};
        my ($path, $anchor) = $t =~ /^([^#]*)(?:#(.*))?$/;
        my $target = $file;
        if ($path ne "") {
          $target = File::Spec->canonpath("$dir/$path");
          # plain text names paths from the repository root or from the page
          $target = $path if !$is_link && !-e $target && -e $path;
          if (!-e $target) { print "$file:$n: $t: no such file\n"; next; }
        }
        next unless defined $anchor && $anchor ne "" && $target =~ /\.md$/;
        my $a = anchors_of($target);
        print "$file:$n: $t: no anchor #$anchor in $target\n" unless $a && $a->{$anchor};
      }
    }
  }')
if [ -n "$link_problems" ]; then
  echo "$link_problems" >&2
  problem "broken links or anchors (above)"
fi

# Every flag of every command documented on its page.
if [ ! -x "$bin" ]; then
  problem "$bin is not built: cannot check the flags (set STALLWATCH_BIN or build it)"
else
  for pair in run:configuration check:commands explain:commands query:commands stacks:commands \
              demo:commands export:integrations mcp:integrations; do
    cmd=${pair%%:*}
    page=docs/${pair#*:}.md
    # (a family such as `--otlp-*` is documented as such: not a flag of its own)
    flags=$("$bin" "$cmd" --help 2>&1 | sed -E 's/--[a-z0-9.-]+-\*//g' | grep -oE '(^|[][ ,|(])--[a-z][a-z0-9.-]*[a-z0-9]' |
            sed -E 's/^[][ ,|(]//' | sort -u)
    [ -n "$flags" ] || problem "$bin $cmd --help lists no flags"
    for f in $flags; do
      # every command's own (docs/commands.md says so once)
      case $f in --help | --version) continue ;; esac
      grep -qE -- "(^|[^a-z0-9.-])${f//./\\.}([^a-z0-9.-]|\$)" "$page" ||
        problem "$cmd $f: not documented in $page"
    done
  done
fi

if [ "$problems" -gt 0 ]; then
  echo "docs: $problems problem(s)" >&2
  exit 1
fi
echo "docs: README.md ($lines lines) and docs/ hold together"
