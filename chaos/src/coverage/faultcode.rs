//! Fault-profile code: the blocks of the store's source that run only
//! when one of its fault profiles (`AGENTSTORE_FAULT`, `run --store-fault`)
//! is on. They are the deliberately broken stores of the mutant corpus,
//! not the store's behaviour, so the figures count them apart instead of
//! as regions a campaign failed to reach.
//!
//! Told apart by syntax, from the source: the block of an `if` and the
//! body of a match arm whose condition (or guard) can hold only when a
//! `fault::active(…)` call is true: that call itself, a conjunction with
//! such a part, or a disjunction of such parts. A fault read into a
//! variable first (`let broken = fault::active(…); if broken { … }`) is
//! not seen, and its block counts as the store's own code.
//!
//! This module reads source text; it must never change what is counted
//! for the store's own code.

use proc_macro2::LineColumn;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{BinOp, Expr};

/// A span of source, as LLVM's coverage mapping writes positions: lines
/// and columns from 1, the end just past the last character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub start: (u32, u32),
    pub end: (u32, u32),
}

impl Block {
    fn of(span: proc_macro2::Span) -> Block {
        // proc-macro2 counts columns from 0 and ends a span past its last
        // character: one more than each is LLVM's column.
        let at = |p: LineColumn| (p.line as u32, p.column as u32 + 1);
        Block {
            start: at(span.start()),
            end: at(span.end()),
        }
    }

    /// Whether the region from `start` to `end` lies within this block.
    pub fn holds(&self, start: (u32, u32), end: (u32, u32)) -> bool {
        self.start <= start && end <= self.end
    }
}

/// The fault-profile blocks of one source file, in source order.
pub fn blocks(source: &str) -> Result<Vec<Block>, syn::Error> {
    let file = syn::parse_file(source)?;
    let mut finder = Finder { blocks: Vec::new() };
    finder.visit_file(&file);
    finder.blocks.sort_by_key(|b| (b.start, b.end));
    Ok(finder.blocks)
}

/// Whether `cond` can be true only while a fault profile is on.
fn needs_a_fault(cond: &Expr) -> bool {
    match cond {
        Expr::Call(call) => match &*call.func {
            Expr::Path(p) => {
                let names: Vec<String> = p
                    .path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect();
                names.ends_with(&["fault".to_string(), "active".to_string()])
            }
            _ => false,
        },
        Expr::Binary(b) => match b.op {
            BinOp::And(_) => needs_a_fault(&b.left) || needs_a_fault(&b.right),
            BinOp::Or(_) => needs_a_fault(&b.left) && needs_a_fault(&b.right),
            _ => false,
        },
        Expr::Paren(p) => needs_a_fault(&p.expr),
        _ => false,
    }
}

struct Finder {
    blocks: Vec<Block>,
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_expr_if(&mut self, node: &'ast syn::ExprIf) {
        if needs_a_fault(&node.cond) {
            self.blocks
                .push(Block::of(node.then_branch.brace_token.span.join()));
        }
        syn::visit::visit_expr_if(self, node);
    }

    fn visit_arm(&mut self, node: &'ast syn::Arm) {
        if let syn::Pat::Guard(g) = &node.pat {
            if needs_a_fault(&g.guard) {
                self.blocks.push(Block::of(node.body.span()));
            }
        }
        syn::visit::visit_arm(self, node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"
fn f(x: u32) -> u32 {
    if fault::active(Fault::A) {
        return 1;
    }
    if !fault::active(Fault::B) {
        sync();
    }
    if x > 3 && crate::fault::active(Fault::C) {
        return 2;
    } else {
        keep();
    }
    if fault::active(Fault::D) || x > 9 {
        return 3;
    }
    if (fault::active(Fault::E) || fault::active(Fault::F)) && x == 1 { return 4; }
    let checked = !fault::active(Fault::G);
    match x {
        0 if fault::active(Fault::H) => 5,
        1 if x > 0 => 6,
        _ => 7,
    }
}
"#;

    #[test]
    fn only_blocks_whose_condition_needs_an_active_fault_are_told_apart() {
        let found: Vec<(u32, u32)> = blocks(SOURCE)
            .expect("it parses")
            .iter()
            .map(|b| (b.start.0, b.end.0))
            .collect();
        // A (lines 3-5), C's then-block (9-11, not its else), E or F (17),
        // H's arm (20); not the negated B, not D or a plain condition, not G.
        assert_eq!(found, [(3, 5), (9, 11), (17, 17), (20, 20)]);
    }

    #[test]
    fn a_block_holds_the_regions_inside_its_braces_and_no_other() {
        let b = blocks(SOURCE).expect("it parses")[0];
        let line3 = SOURCE.lines().nth(2).expect("line 3");
        let brace = line3.find('{').expect("a brace") as u32 + 1;
        assert_eq!(b.start, (3, brace));
        assert_eq!(b.end, (5, 6));
        assert!(b.holds((3, brace), (5, 6)));
        assert!(b.holds((4, 9), (4, 18)));
        assert!(!b.holds((3, 5), (3, 31)), "the condition is the store's");
        assert!(!b.holds((6, 5), (8, 6)));
    }

    #[test]
    fn the_store_has_fault_profile_code_and_it_parses() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../store/src");
        let log = std::fs::read_to_string(root.join("log.rs")).expect("store/src/log.rs");
        let found = blocks(&log).expect("log.rs parses");
        let line = |needle: &str| {
            log.lines()
                .position(|l| l.contains(needle))
                .map(|i| i as u32 + 1)
                .expect(needle)
        };
        let quarantine = line("fault::active(Fault::QuarantineOverwrite)");
        assert!(
            found.iter().any(|b| b.start.0 == quarantine),
            "the block after line {quarantine}: {found:?}"
        );
    }
}
