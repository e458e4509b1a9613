//! The public API of each library crate of the workspace is written down in
//! `api/<package>.txt` (`api/leasehold-actors.txt`, `api/leasehold.txt`),
//! so that every change to it shows in review as a change to that file.
//!
//! This test reads each crate's sources with `syn`, lists what is public,
//! and compares the list with the file. When they differ it fails, printing
//! the lines removed (`-`) and added (`+`). A change meant to be made is
//! accepted by running
//!
//! ```text
//! LEASEHOLD_ACCEPT_API=1 cargo test -p leasehold-tests --test public_api
//! ```
//!
//! which writes the files anew instead of failing (and says which it
//! wrote); they are committed with the change.
//!
//! What is listed: every item reachable from the crate's root by public
//! paths, under the path it is reached by.
//!
//! - The module tree is the compiler's (`mod x;` is `x.rs` or `x/mod.rs`,
//!   `#[path]` is followed, inline `mod x { … }` is a module). A `pub mod`
//!   is listed (`pub mod leasehold::config`) and its public items after
//!   it; a `pub use` lists what it names under the re-exporting module's
//!   path, followed through private modules and other `use`s to the item
//!   itself; a glob (`pub use m::*`) lists `m`'s public names. A re-export
//!   of another crate's item is one line, `pub use <path> = <other path>`;
//!   a glob of another crate, `pub use leasehold::* = leasehold_actors::*`
//!   (that crate's own snapshot lists it).
//! - An item reached by several paths is written out once, under its
//!   canonical path: the one through the fewest `use`s, then the shortest,
//!   then the first in order; every other path is one line,
//!   `pub use <path> = <canonical path>`.
//! - Each item is a signature without body or documentation: `pub fn`
//!   with its generics and where clause, `pub struct` with its public
//!   fields and `..` for private ones (a tuple struct's private fields are
//!   `_`), `pub enum` with its variants, `pub trait` with its items (a
//!   provided one ends with `{ ... }`), `pub const`, `pub static` and
//!   `pub type` with their types. A type's line shows its `#[derive(…)]`
//!   (the derives' names) and `#[non_exhaustive]`; an item, field or
//!   variant under `#[cfg(…)]` shows its `cfg`, and so do the modules and
//!   re-exports it is reached through. Every `cfg` is read as on, but
//!   `#[cfg(test)]` code is the crate's unit tests and is left out.
//! - After a type: the `pub` members of its inherent `impl` blocks, then
//!   each trait it implements, one line each (`impl Display for …`). A
//!   trait of the crate also lists its impls for types not of the crate.
//!   An impl of a trait the crate does not make public is left out.
//!   Types in signatures are written as in the source.
//! - Lines are sorted by module, then by name: the file is the same from
//!   run to run, and moving an item within its crate changes nothing.
//!
//! Items that `macro_rules!` macros generate are not seen.

#[path = "support/source.rs"]
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use quote::ToTokens;
use source::{item_attrs, path_attr, test_only, workspace};
use syn::punctuated::Punctuated;

/// The environment variable that makes the test write the snapshots.
const ACCEPT: &str = "LEASEHOLD_ACCEPT_API";

/// One library crate of the workspace.
struct Library {
    /// Its package's name: `leasehold-actors`.
    package: String,
    /// Its name in paths: `leasehold_actors`.
    name: String,
    /// Its root file.
    root: PathBuf,
}

/// The library crates of the workspace's published packages, as `cargo
/// metadata` lists them (offline: no dependency is resolved).
fn libraries(workspace: &Path) -> Vec<Library> {
    let metadata = source::metadata(workspace);
    let mut libraries = Vec::new();
    for package in metadata["packages"].as_array().expect("a package list") {
        // `publish = false` reads `"publish": []`: tests, examples, fuzz.
        if package["publish"].as_array().is_some_and(Vec::is_empty) {
            continue;
        }
        for target in package["targets"].as_array().expect("a target list") {
            let kinds = target["kind"].as_array().expect("a target's kinds");
            if !kinds.iter().any(|k| k == "lib") {
                continue;
            }
            libraries.push(Library {
                package: package["name"].as_str().expect("a name").to_owned(),
                name: target["name"].as_str().expect("a name").replace('-', "_"),
                root: PathBuf::from(target["src_path"].as_str().expect("a root file")),
            });
        }
    }
    libraries.sort_by(|a, b| a.package.cmp(&b.package));
    libraries
}

// ---------------------------------------------------------------------
// Tokens as text.

/// One word, operator or bracket of a token stream.
#[derive(Clone, Debug, PartialEq)]
enum Atom {
    /// An identifier, a keyword, a lifetime or a literal.
    Word(String),
    /// Punctuation, joint characters together: `::`, `->`, `&`.
    Op(String),
    Open(char),
    Close(char),
}

fn flush_op(op: &mut String, out: &mut Vec<Atom>) {
    if op.is_empty() {
        return;
    }
    // `>>` closing two generic lists is two closings.
    if op.len() > 1 && op.chars().all(|c| c == '>') {
        out.extend(op.chars().map(|c| Atom::Op(c.to_string())));
    } else {
        out.push(Atom::Op(op.clone()));
    }
    op.clear();
}

/// Commas at the top level of `atoms` (not within brackets).
fn top_level_commas(atoms: &[Atom]) -> usize {
    let mut depth = 0usize;
    let mut commas = 0;
    for atom in atoms {
        match atom {
            Atom::Open(_) => depth += 1,
            Atom::Close(_) => depth = depth.saturating_sub(1),
            Atom::Op(op) if op == "," && depth == 0 => commas += 1,
            _ => {}
        }
    }
    commas
}

fn atoms(stream: TokenStream, out: &mut Vec<Atom>) {
    let mut op = String::new();
    let mut lifetime = false;
    for tree in stream {
        if !matches!(tree, TokenTree::Punct(_)) {
            flush_op(&mut op, out);
        }
        match tree {
            TokenTree::Punct(p) => {
                if p.as_char() == '\'' && p.spacing() == Spacing::Joint && op.is_empty() {
                    lifetime = true;
                    continue;
                }
                op.push(p.as_char());
                if p.spacing() == Spacing::Alone {
                    flush_op(&mut op, out);
                }
            }
            TokenTree::Ident(ident) => {
                let word = if lifetime {
                    format!("'{ident}")
                } else {
                    ident.to_string()
                };
                lifetime = false;
                out.push(Atom::Word(word));
            }
            TokenTree::Literal(literal) => out.push(Atom::Word(literal.to_string())),
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ('(', ')'),
                    Delimiter::Bracket => ('[', ']'),
                    Delimiter::Brace => ('{', '}'),
                    Delimiter::None => {
                        atoms(group.stream(), out);
                        continue;
                    }
                };
                let mut inner = Vec::new();
                atoms(group.stream(), &mut inner);
                // A trailing comma (rustfmt's, on a broken line) is noise,
                // but for a one-element tuple's.
                if inner.last() == Some(&Atom::Op(",".into()))
                    && (open != '(' || top_level_commas(&inner) >= 2)
                {
                    inner.pop();
                }
                out.push(Atom::Open(open));
                out.extend(inner);
                out.push(Atom::Close(close));
            }
        }
    }
    flush_op(&mut op, out);
}

/// Keywords after which a bracket is not a call's: `&mut [u8]`.
const SPACED_KEYWORDS: [&str; 12] = [
    "mut", "dyn", "impl", "as", "in", "for", "where", "const", "static", "unsafe", "extern", "type",
];

/// Whether a space goes between `prev` and `next`.
fn spaced(prev: &Atom, next: &Atom) -> bool {
    use Atom::{Close, Op, Open, Word};
    let op = |a: &Atom, s: &str| matches!(a, Op(o) if o == s);
    match (prev, next) {
        (Open(c), _) => *c == '{',
        (_, Close(c)) => *c == '}',
        (_, Op(o)) if [",", ";", ":", "."].contains(&o.as_str()) => false,
        (Op(o), _) if ["::", ".", "&", "#", "!", "*", "$", "?"].contains(&o.as_str()) => false,
        (_, Op(o)) if o == "::" => !matches!(prev, Word(_) | Close(_)) && !op(prev, ">"),
        (_, Op(o)) if o == "<" => !matches!(prev, Word(_)),
        (Op(o), _) if o == "<" => false,
        (_, Op(o)) if o == ">" => false,
        (_, Op(o)) if o == "!" => !matches!(prev, Word(_)),
        (Op(o), Open(c)) if o == ">" => !matches!(c, '(' | '['),
        (Word(w), Open('(' | '[')) => SPACED_KEYWORDS.contains(&w.as_str()),
        _ => true,
    }
}

/// `tokens` as one line of text: Rust's usual spacing, no trailing commas.
fn text(tokens: &impl ToTokens) -> String {
    let mut all = Vec::new();
    atoms(tokens.to_token_stream(), &mut all);
    let mut kept: Vec<Atom> = Vec::with_capacity(all.len());
    for (n, atom) in all.iter().enumerate() {
        let comma = *atom == Atom::Op(",".into());
        let next = all.get(n + 1);
        if comma && (next.is_none() || next == Some(&Atom::Op(">".into()))) {
            continue;
        }
        kept.push(atom.clone());
    }
    let mut out = String::new();
    for (n, atom) in kept.iter().enumerate() {
        if n > 0 && spaced(&kept[n - 1], atom) {
            out.push(' ');
        }
        match atom {
            Atom::Word(w) | Atom::Op(w) => out.push_str(w),
            Atom::Open(c) | Atom::Close(c) => out.push(*c),
        }
    }
    out
}

// ---------------------------------------------------------------------
// Attributes.

/// The `#[cfg(…)]` attributes among `attrs`, as text.
fn cfgs(attrs: &[syn::Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .map(|attr| format!("#[{}]", text(&attr.meta)))
        .collect()
}

/// The attributes that are part of an item's API, as a prefix to its
/// line: its `cfg`s (with `outer`, those of the paths it is reached
/// through), its derives' names and `#[non_exhaustive]`.
fn prefix(attrs: &[syn::Attribute], outer: &[String]) -> String {
    let mut conditions: BTreeSet<String> = outer.iter().cloned().collect();
    conditions.extend(cfgs(attrs));
    let mut out = String::new();
    for condition in conditions {
        out.push_str(&condition);
        out.push(' ');
    }
    let mut derives = BTreeSet::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let paths = attr
            .parse_args_with(Punctuated::<syn::Path, syn::Token![,]>::parse_terminated)
            .expect("a derive names paths");
        for path in paths {
            let last = path.segments.last().expect("a path has a segment");
            derives.insert(last.ident.to_string());
        }
    }
    if !derives.is_empty() {
        let names: Vec<String> = derives.into_iter().collect();
        let _ = write!(out, "#[derive({})] ", names.join(", "));
    }
    if attrs.iter().any(|a| a.path().is_ident("non_exhaustive")) {
        out.push_str("#[non_exhaustive] ");
    }
    out
}

/// The name an item defines in its module, and whether it is `pub`.
fn defined(item: &syn::Item) -> Option<(String, bool)> {
    let (ident, vis) = match item {
        syn::Item::Const(i) => (&i.ident, &i.vis),
        syn::Item::Enum(i) => (&i.ident, &i.vis),
        syn::Item::Fn(i) => (&i.sig.ident, &i.vis),
        syn::Item::Static(i) => (&i.ident, &i.vis),
        syn::Item::Struct(i) => (&i.ident, &i.vis),
        syn::Item::Trait(i) => (&i.ident, &i.vis),
        syn::Item::TraitAlias(i) => (&i.ident, &i.vis),
        syn::Item::Type(i) => (&i.ident, &i.vis),
        syn::Item::Union(i) => (&i.ident, &i.vis),
        _ => return None,
    };
    let name = ident.to_string();
    (name != "_").then(|| (name, public(vis)))
}

/// Whether `vis` is `pub` itself (not `pub(crate)` and the like).
fn public(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

// ---------------------------------------------------------------------
// The module tree and its names.

/// One leaf of a `use` item.
struct UseLeaf {
    /// The name it binds; none for a glob or `_`.
    binding: Option<String>,
    /// The path it names (the glob's module for a glob).
    path: Vec<String>,
    glob: bool,
    public: bool,
    cfgs: Vec<String>,
}

fn use_leaves(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Option<String>, Vec<String>, bool)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut path = prefix.clone();
            if name == "self" {
                out.push((prefix.last().cloned(), path, false));
            } else {
                path.push(name.clone());
                out.push((Some(name), path, false));
            }
        }
        syn::UseTree::Rename(r) => {
            let name = r.ident.to_string();
            let mut path = prefix.clone();
            if name != "self" {
                path.push(name);
            }
            let rename = r.rename.to_string();
            out.push(((rename != "_").then_some(rename), path, false));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix.clone(), true)),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, out);
            }
        }
    }
}

/// One module: a file, or an inline `mod name { … }` within one.
struct Module {
    parent: Option<usize>,
    /// Its crate's root module.
    root: usize,
    /// Whether it is declared `pub`.
    public: bool,
    /// The `cfg`s of its declaration.
    cfgs: Vec<String>,
    /// Its items but modules, `#[cfg(test)]` ones left out.
    items: Vec<syn::Item>,
    children: BTreeMap<String, usize>,
    uses: Vec<UseLeaf>,
}

/// Where a module stands: the folders its declarations start from.
struct Site {
    file_dir: PathBuf,
    parent: Option<usize>,
    root: usize,
    /// Where the files of its `mod child;` declarations are looked for.
    dir: PathBuf,
    /// Whether its items are the whole of their file: a `#[path]` there
    /// starts from the file's folder.
    file_level: bool,
    public: bool,
    cfgs: Vec<String>,
}

/// What a path leads to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Module(usize),
    /// An item, by its module and its index among the module's items.
    Item(usize, usize),
    /// Another crate's item, or what is not followed (an enum's variant),
    /// by the path written.
    Outside(Vec<String>),
}

/// A name's meaning, with the `use`s followed to reach it and the `cfg`s
/// on the way.
#[derive(Clone, Debug)]
struct Binding {
    target: Target,
    hops: usize,
    cfgs: Vec<String>,
}

impl Binding {
    fn new(target: Target, cfgs: Vec<String>) -> Binding {
        Binding {
            target,
            hops: 0,
            cfgs,
        }
    }

    /// `self`, reached through `hops` more `use`s under `cfgs`.
    fn through(mut self, hops: usize, cfgs: &[String]) -> Binding {
        self.hops += hops;
        for cfg in cfgs {
            if !self.cfgs.contains(cfg) {
                self.cfgs.push(cfg.clone());
            }
        }
        self
    }
}

#[derive(Default)]
struct Tree {
    modules: Vec<Module>,
}

impl Tree {
    /// The crate whose root file is `root`.
    fn read(root: &Path) -> Tree {
        let mut tree = Tree::default();
        let site = Site {
            file_dir: root.parent().expect("a root file sits in a folder").into(),
            parent: None,
            root: 0,
            dir: root.parent().expect("a folder").into(),
            file_level: true,
            public: true,
            cfgs: Vec::new(),
        };
        tree.read_file(root, site);
        tree
    }

    fn read_file(&mut self, file: &Path, site: Site) -> usize {
        let text = fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()));
        let mut site = site;
        site.cfgs.extend(cfgs(&parsed.attrs));
        self.add_module(site, parsed.items)
    }

    fn add_module(&mut self, site: Site, items: Vec<syn::Item>) -> usize {
        let id = self.modules.len();
        let mut module = Module {
            parent: site.parent,
            root: site.root,
            public: site.public,
            cfgs: site.cfgs.clone(),
            items: Vec::new(),
            children: BTreeMap::new(),
            uses: Vec::new(),
        };
        let mut mods = Vec::new();
        for item in items {
            if test_only(item_attrs(&item)) {
                continue;
            }
            match item {
                syn::Item::Mod(m) => mods.push(m),
                syn::Item::Use(u) => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    for (binding, path, glob) in leaves {
                        module.uses.push(UseLeaf {
                            binding,
                            path,
                            glob,
                            public: public(&u.vis),
                            cfgs: cfgs(&u.attrs),
                        });
                    }
                    module.items.push(syn::Item::Use(u));
                }
                other => module.items.push(other),
            }
        }
        self.modules.push(module);
        for m in mods {
            let name = m.ident.to_string();
            let public = public(&m.vis);
            let cfgs = cfgs(&m.attrs);
            let child = match m.content {
                Some((_, content)) => {
                    let inline = Site {
                        file_dir: site.file_dir.clone(),
                        parent: Some(id),
                        root: site.root,
                        dir: site.dir.join(&name),
                        file_level: false,
                        public,
                        cfgs,
                    };
                    self.add_module(inline, content)
                }
                None => {
                    let (path, dir) = match path_attr(&m.attrs) {
                        Some(named) => {
                            let from = if site.file_level {
                                &site.file_dir
                            } else {
                                &site.dir
                            };
                            let path = from.join(named);
                            let dir = path.parent().expect("a module file's folder").into();
                            (path, dir)
                        }
                        None => {
                            let flat = site.dir.join(format!("{name}.rs"));
                            let nested = site.dir.join(&name).join("mod.rs");
                            let path = if flat.exists() { flat } else { nested };
                            (path, site.dir.join(&name))
                        }
                    };
                    let file_dir = path.parent().expect("a file sits in a folder").into();
                    let site = Site {
                        file_dir,
                        parent: Some(id),
                        root: site.root,
                        dir,
                        file_level: true,
                        public,
                        cfgs,
                    };
                    self.read_file(&path, site)
                }
            };
            self.modules[id].children.insert(name, child);
        }
        id
    }

    fn item(&self, module: usize, index: usize) -> &syn::Item {
        &self.modules[module].items[index]
    }

    /// What `path`, written in `module`, leads to.
    fn resolve(&self, module: usize, path: &[String]) -> Vec<Binding> {
        self.resolve_from(module, path, &mut Vec::new())
    }

    fn resolve_from(
        &self,
        module: usize,
        path: &[String],
        seen: &mut Vec<(usize, String)>,
    ) -> Vec<Binding> {
        let outside = || vec![Binding::new(Target::Outside(path.to_vec()), Vec::new())];
        let Some((first, rest)) = path.split_first() else {
            return vec![Binding::new(Target::Module(module), Vec::new())];
        };
        let step = |m: usize, segment: &str, seen: &mut Vec<(usize, String)>| match segment {
            "crate" | "$crate" => vec![Binding::new(
                Target::Module(self.modules[m].root),
                Vec::new(),
            )],
            "self" => vec![Binding::new(Target::Module(m), Vec::new())],
            "super" => self.modules[m]
                .parent
                .map(|p| Binding::new(Target::Module(p), Vec::new()))
                .into_iter()
                .collect(),
            name => self.lookup(m, name, seen),
        };
        let mut current = step(module, first, seen);
        if current.is_empty() {
            return outside();
        }
        for (n, segment) in rest.iter().enumerate() {
            let mut next = Vec::new();
            for binding in &current {
                if let Target::Module(m) = binding.target {
                    for found in step(m, segment, seen) {
                        next.push(found.through(binding.hops, &binding.cfgs));
                    }
                }
            }
            if next.is_empty() {
                // Another crate's path goes on there; an enum's variant or
                // an unknown name is kept as written.
                if let Some(Target::Outside(p)) = current
                    .iter()
                    .map(|b| &b.target)
                    .find(|t| matches!(t, Target::Outside(_)))
                {
                    let mut p = p.clone();
                    p.extend(rest[n..].iter().cloned());
                    return vec![Binding::new(Target::Outside(p), Vec::new())];
                }
                return outside();
            }
            current = next;
        }
        current
    }

    /// What `name` means in `module`: its child, the items it defines, or
    /// what its `use`s and then its glob imports bring.
    fn lookup(&self, module: usize, name: &str, seen: &mut Vec<(usize, String)>) -> Vec<Binding> {
        let m = &self.modules[module];
        let mut found = Vec::new();
        if let Some(&child) = m.children.get(name) {
            found.push(Binding::new(
                Target::Module(child),
                self.modules[child].cfgs.clone(),
            ));
        }
        for (index, item) in m.items.iter().enumerate() {
            if defined(item).is_some_and(|(n, _)| n == name) {
                found.push(Binding::new(
                    Target::Item(module, index),
                    cfgs(item_attrs(item)),
                ));
            }
        }
        if !found.is_empty() {
            return found;
        }
        let key = (module, name.to_owned());
        if seen.contains(&key) {
            return found;
        }
        seen.push(key);
        for leaf in m.uses.iter().filter(|u| u.binding.as_deref() == Some(name)) {
            for binding in self.resolve_from(module, &leaf.path, seen) {
                found.push(binding.through(1, &leaf.cfgs));
            }
        }
        if found.is_empty() {
            for leaf in m.uses.iter().filter(|u| u.glob) {
                for glob in self.resolve_from(module, &leaf.path, seen) {
                    if let Target::Module(from) = glob.target {
                        for binding in self.lookup(from, name, seen) {
                            found.push(
                                binding
                                    .through(glob.hops + 1, &glob.cfgs)
                                    .through(0, &leaf.cfgs),
                            );
                        }
                    }
                }
            }
        }
        seen.pop();
        found
    }

    /// The names `module` makes public and what each means; another
    /// crate's glob it re-exports is named `*`.
    fn public_names(&self, module: usize, seen: &mut Vec<usize>) -> Vec<(String, Binding)> {
        let m = &self.modules[module];
        let mut names = Vec::new();
        for (name, &child) in &m.children {
            if self.modules[child].public {
                names.push((
                    name.clone(),
                    Binding::new(Target::Module(child), self.modules[child].cfgs.clone()),
                ));
            }
        }
        for (index, item) in m.items.iter().enumerate() {
            if let Some((name, true)) = defined(item) {
                names.push((
                    name,
                    Binding::new(Target::Item(module, index), cfgs(item_attrs(item))),
                ));
            }
        }
        for leaf in m.uses.iter().filter(|u| u.public && !u.glob) {
            let Some(name) = &leaf.binding else { continue };
            for binding in self.resolve(module, &leaf.path) {
                names.push((name.clone(), binding.through(1, &leaf.cfgs)));
            }
        }
        // A glob brings the names not already there.
        let explicit: BTreeSet<String> = names.iter().map(|(n, _)| n.clone()).collect();
        seen.push(module);
        for leaf in m.uses.iter().filter(|u| u.public && u.glob) {
            for glob in self.resolve(module, &leaf.path) {
                match glob.target {
                    Target::Module(from) if !seen.contains(&from) => {
                        for (name, binding) in self.public_names(from, seen) {
                            if !explicit.contains(&name) {
                                names.push((
                                    name,
                                    binding
                                        .through(glob.hops + 1, &glob.cfgs)
                                        .through(0, &leaf.cfgs),
                                ));
                            }
                        }
                    }
                    Target::Outside(path) => names.push((
                        "*".to_owned(),
                        Binding::new(Target::Outside(path), leaf.cfgs.clone()),
                    )),
                    _ => {}
                }
            }
        }
        seen.pop();
        names
    }
}

// ---------------------------------------------------------------------
// The public items and their paths.

/// A public path and what it leads to.
#[derive(Clone, Debug)]
struct Reached {
    path: Vec<String>,
    target: Target,
    hops: usize,
    cfgs: Vec<String>,
}

impl Reached {
    /// The order of preference among the paths to one item.
    fn rank(&self) -> (usize, usize, &[String]) {
        (self.hops, self.path.len(), &self.path)
    }
}

/// A module to read, in the order of preference of its paths: the `use`s
/// followed to reach it, the length of its path, the path; then the module
/// and the `cfg`s on the way.
type Pending = (usize, usize, Vec<String>, usize, Vec<String>);

/// Every public path of the crate whose root is module 0 of `tree`, named
/// `name`: each module's contents are read once, from its canonical path.
fn reach(tree: &Tree, name: &str) -> Vec<Reached> {
    let mut queue: BTreeSet<Pending> = BTreeSet::new();
    queue.insert((0, 1, vec![name.to_owned()], 0, Vec::new()));
    let mut read: BTreeSet<usize> = BTreeSet::new();
    let mut reached = Vec::new();
    while let Some((hops, _, path, module, cfgs)) = queue.pop_first() {
        reached.push(Reached {
            path: path.clone(),
            target: Target::Module(module),
            hops,
            cfgs: cfgs.clone(),
        });
        if !read.insert(module) {
            continue;
        }
        for (name, binding) in tree.public_names(module, &mut Vec::new()) {
            let mut to = path.clone();
            to.push(name);
            let binding = binding.through(hops, &cfgs);
            match binding.target {
                Target::Module(m) => {
                    queue.insert((binding.hops, to.len(), to, m, binding.cfgs));
                }
                target => reached.push(Reached {
                    path: to,
                    target,
                    hops: binding.hops,
                    cfgs: binding.cfgs,
                }),
            }
        }
    }
    reached
}

/// One entry of a snapshot: where it sorts and its lines.
struct Entry {
    parent: Vec<String>,
    name: String,
    lines: Vec<String>,
}

/// The public API of the crate read into `tree`, named `name`; `siblings`
/// are the workspace's library crates, by name, with their packages.
fn snapshot_of(tree: &Tree, name: &str, siblings: &BTreeMap<String, String>) -> String {
    let reached = reach(tree, name);
    // The canonical path of each module and item.
    let mut canonical: BTreeMap<Target, Reached> = BTreeMap::new();
    for r in &reached {
        if matches!(r.target, Target::Outside(_)) {
            continue;
        }
        let better = canonical
            .get(&r.target)
            .is_none_or(|known| r.rank() < known.rank());
        if better {
            canonical.insert(r.target.clone(), r.clone());
        }
    }
    let impls = impls(tree, &canonical);
    let mut entries = Vec::new();
    let mut written = BTreeSet::new();
    for r in &reached {
        let (parent, last) = r.path.split_at(r.path.len() - 1);
        let entry = |lines: Vec<String>| Entry {
            parent: parent.to_vec(),
            name: last[0].clone(),
            lines,
        };
        let path = r.path.join("::");
        let conditions = prefix(&[], &r.cfgs);
        match &r.target {
            Target::Outside(outside) => {
                let mut line = format!("{conditions}pub use {path} = {}", outside.join("::"));
                if last[0] == "*" {
                    line.push_str("::*");
                    if let [other] = outside.as_slice()
                        && let Some(package) = siblings.get(other)
                    {
                        let _ = write!(
                            line,
                            " (the root of {package}, listed in api/{package}.txt)"
                        );
                    }
                }
                entries.push(entry(vec![line]));
            }
            target => {
                let first = &canonical[target];
                if first.path != r.path {
                    let to = first.path.join("::");
                    entries.push(entry(vec![format!("{conditions}pub use {path} = {to}")]));
                    continue;
                }
                // Reached by its canonical path twice (a glob and a name).
                if !written.insert(target.clone()) {
                    continue;
                }
                match target {
                    Target::Module(0) => {}
                    Target::Module(_) => {
                        entries.push(entry(vec![format!("{conditions}pub mod {path}")]))
                    }
                    Target::Item(m, i) => {
                        let mut lines = item_lines(tree.item(*m, *i), &path, &r.cfgs);
                        lines.extend(impls.get(target).cloned().unwrap_or_default());
                        entries.push(entry(lines));
                    }
                    Target::Outside(_) => unreachable!(),
                }
            }
        }
    }
    entries.sort_by(|a, b| (&a.parent, &a.name, &a.lines).cmp(&(&b.parent, &b.name, &b.lines)));
    entries.dedup_by(|a, b| a.parent == b.parent && a.name == b.name && a.lines == b.lines);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// The public API of `{name}`, written by tests/tests/public_api.rs.\n\
         // A change is accepted with LEASEHOLD_ACCEPT_API=1 cargo test -p leasehold-tests --test public_api"
    );
    let mut group: Option<&[String]> = None;
    for entry in &entries {
        if group != Some(entry.parent.as_slice()) {
            out.push('\n');
            group = Some(&entry.parent);
        }
        for line in &entry.lines {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The identifiers of a path's segments.
fn idents(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

/// The generic arguments of a path's last segment, as text.
fn last_args(path: &syn::Path) -> String {
    path.segments
        .last()
        .map(|s| text(&s.arguments))
        .unwrap_or_default()
}

/// The item of the crate a path written in `module` names, if it is one
/// of the kinds `wanted` accepts.
fn item_named(
    tree: &Tree,
    module: usize,
    path: &syn::Path,
    wanted: fn(&syn::Item) -> bool,
) -> Option<Target> {
    tree.resolve(module, &idents(path))
        .into_iter()
        .map(|b| b.target)
        .find(|t| matches!(t, Target::Item(m, i) if wanted(tree.item(*m, *i))))
}

/// The `cfg`s of `module`'s declaration and of its ancestors'.
fn module_cfgs(tree: &Tree, module: usize) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut at = Some(module);
    while let Some(m) = at {
        found.extend(tree.modules[m].cfgs.iter().cloned());
        at = tree.modules[m].parent;
    }
    found
}

/// `conditions` as a prefix to a line.
fn conditions_text(conditions: &BTreeSet<String>) -> String {
    conditions.iter().map(|c| format!("{c} ")).collect()
}

/// The impls of one public type or trait: inherent blocks by their header
/// with their members, and trait impls' lines.
#[derive(Default)]
struct Impls {
    inherent: BTreeMap<String, BTreeSet<String>>,
    traits: BTreeSet<String>,
}

/// The lines of each public type's and trait's impls, by the type or trait.
fn impls(tree: &Tree, canonical: &BTreeMap<Target, Reached>) -> BTreeMap<Target, Vec<String>> {
    let is_type = |item: &syn::Item| {
        matches!(
            item,
            syn::Item::Struct(_) | syn::Item::Enum(_) | syn::Item::Union(_) | syn::Item::Type(_)
        )
    };
    let is_trait = |item: &syn::Item| matches!(item, syn::Item::Trait(_));
    // The `cfg`s an item's own line already shows.
    let shown = |target: &Target| -> BTreeSet<String> {
        let Target::Item(m, i) = target else {
            return BTreeSet::new();
        };
        let mut shown: BTreeSet<String> = canonical[target].cfgs.iter().cloned().collect();
        shown.extend(cfgs(item_attrs(tree.item(*m, *i))));
        shown
    };
    let mut found: BTreeMap<Target, Impls> = BTreeMap::new();
    for (m, module) in tree.modules.iter().enumerate() {
        for item in &module.items {
            let syn::Item::Impl(imp) = item else { continue };
            let self_path = match &*imp.self_ty {
                syn::Type::Path(p) if p.qself.is_none() => Some(&p.path),
                _ => None,
            };
            let self_item = self_path.and_then(|p| item_named(tree, m, p, is_type));
            let trait_item = imp
                .trait_
                .as_ref()
                .and_then(|(p, _)| item_named(tree, m, p, is_trait));
            // A trait of the crate that is not public is no part of the API.
            if trait_item
                .as_ref()
                .is_some_and(|t| !canonical.contains_key(t))
            {
                continue;
            }
            // An impl for a type of the crate is listed under the type if
            // it is public, and not at all if not; an impl of a trait of
            // the crate for another type, under the trait.
            let (key, of_type) = match (&self_item, &trait_item) {
                (Some(t), _) if canonical.contains_key(t) => (t.clone(), true),
                (None, Some(t)) => (t.clone(), false),
                _ => continue,
            };
            // The impl holds where its module is compiled, its own `cfg`s
            // and its trait's hold; what the type's line shows is not
            // repeated.
            let mut conditions = module_cfgs(tree, m);
            conditions.extend(cfgs(&imp.attrs));
            if let Some(t) = &trait_item {
                conditions.extend(shown(t));
            }
            let conditions: BTreeSet<String> =
                conditions.difference(&shown(&key)).cloned().collect();
            let conditions = conditions_text(&conditions);
            let (generics, bounds) = generics(&imp.generics);
            let self_text = match self_path {
                Some(p) if of_type => {
                    format!("{}{}", canonical[&key].path.join("::"), last_args(p))
                }
                _ => text(&imp.self_ty),
            };
            let unsafety = if imp.unsafety.is_some() {
                "unsafe "
            } else {
                ""
            };
            let entry = found.entry(key).or_default();
            match &imp.trait_ {
                Some((path, _)) => {
                    let trait_text = match &trait_item {
                        Some(t) => format!("{}{}", canonical[t].path.join("::"), last_args(path)),
                        None => text(path.segments.last().expect("a path has a segment")),
                    };
                    let not = if imp.modifiers.polarity.is_some() {
                        "!"
                    } else {
                        ""
                    };
                    entry.traits.insert(format!(
                        "{conditions}{unsafety}impl{generics} {not}{trait_text} for {self_text}{bounds}"
                    ));
                }
                None => {
                    let members = inherent_members(imp);
                    if !members.is_empty() {
                        let header =
                            format!("{conditions}{unsafety}impl{generics} {self_text}{bounds} {{");
                        entry.inherent.entry(header).or_default().extend(members);
                    }
                }
            }
        }
    }
    found
        .into_iter()
        .map(|(key, impls)| {
            let mut lines = Vec::new();
            for (header, members) in impls.inherent {
                lines.push(header);
                lines.extend(members.into_iter().map(|m| format!("    {m}")));
                lines.push("}".to_owned());
            }
            lines.extend(impls.traits);
            (key, lines)
        })
        .collect()
}

/// A function's signature, without its arguments' `mut` and attributes.
fn signature(sig: &syn::Signature) -> String {
    let mut sig = sig.clone();
    for arg in sig.inputs.iter_mut() {
        match arg {
            syn::FnArg::Receiver(r) => {
                r.attrs.clear();
                r.mutability = None;
            }
            syn::FnArg::Typed(t) => {
                t.attrs.clear();
                if let syn::Pat::Ident(p) = &mut *t.pat {
                    p.mutability = None;
                }
            }
        }
    }
    if sig.inputs.trailing_punct() {
        sig.inputs.pop_punct();
    }
    text(&sig)
}

/// The `pub` members of an inherent impl block, sorted.
fn inherent_members(imp: &syn::ItemImpl) -> Vec<String> {
    let mut members = Vec::new();
    for item in &imp.items {
        let line = match item {
            syn::ImplItem::Fn(f) if public(&f.vis) && !test_only(&f.attrs) => {
                format!("{}pub {};", prefix(&f.attrs, &[]), signature(&f.sig))
            }
            syn::ImplItem::Const(c) if public(&c.vis) && !test_only(&c.attrs) => format!(
                "{}pub const {}: {};",
                prefix(&c.attrs, &[]),
                c.ident,
                text(&c.ty)
            ),
            syn::ImplItem::Type(t) if public(&t.vis) && !test_only(&t.attrs) => format!(
                "{}pub type {}{} = {};",
                prefix(&t.attrs, &[]),
                t.ident,
                text(&t.generics),
                text(&t.ty)
            ),
            _ => continue,
        };
        members.push(line);
    }
    members.sort();
    members
}

/// Generic parameters and where clause, as text.
fn generics(g: &syn::Generics) -> (String, String) {
    let bounds = g
        .where_clause
        .as_ref()
        .map(|w| format!(" {}", text(w)))
        .unwrap_or_default();
    (text(g), bounds)
}

/// A field's line: `pub name: Type` or, in a tuple, `pub Type`.
fn field_text(field: &syn::Field) -> String {
    let conditions = prefix(&field.attrs, &[]);
    let vis = if public(&field.vis) { "pub " } else { "" };
    match &field.ident {
        Some(ident) => format!("{conditions}{vis}{ident}: {}", text(&field.ty)),
        None => format!("{conditions}{vis}{}", text(&field.ty)),
    }
}

/// The lines of named fields, public ones only, `..` for the others.
fn named_fields(fields: &syn::FieldsNamed) -> Vec<String> {
    let mut lines = Vec::new();
    let mut hidden = false;
    for field in fields.named.iter().filter(|f| !test_only(&f.attrs)) {
        if public(&field.vis) {
            lines.push(format!("    {},", field_text(field)));
        } else {
            hidden = true;
        }
    }
    if hidden {
        lines.push("    ..".to_owned());
    }
    lines
}

/// Lines for `header` and its body `members`: one line when there are none.
fn block(header: String, members: Vec<String>, empty: &str) -> Vec<String> {
    if members.is_empty() {
        return vec![format!("{header}{empty}")];
    }
    if members == ["    .."] {
        return vec![format!("{header} {{ .. }}")];
    }
    let mut lines = vec![format!("{header} {{")];
    lines.extend(members);
    lines.push("}".to_owned());
    lines
}

/// The lines of a public item, written out under `path`, reached under
/// the `cfg`s `outer`.
fn item_lines(item: &syn::Item, path: &str, outer: &[String]) -> Vec<String> {
    let attrs = item_attrs(item);
    let pre = prefix(attrs, outer);
    match item {
        syn::Item::Struct(s) => {
            let (params, bounds) = generics(&s.generics);
            let header = format!("{pre}pub struct {path}{params}");
            match &s.fields {
                syn::Fields::Named(named) => {
                    block(format!("{header}{bounds}"), named_fields(named), " {}")
                }
                syn::Fields::Unnamed(unnamed) => {
                    let fields: Vec<String> = unnamed
                        .unnamed
                        .iter()
                        .filter(|f| !test_only(&f.attrs))
                        .map(|f| {
                            if public(&f.vis) {
                                field_text(f)
                            } else {
                                "_".to_owned()
                            }
                        })
                        .collect();
                    vec![format!("{header}({}){bounds}", fields.join(", "))]
                }
                syn::Fields::Unit => vec![format!("{header}{bounds}")],
            }
        }
        syn::Item::Union(u) => {
            let (params, bounds) = generics(&u.generics);
            block(
                format!("{pre}pub union {path}{params}{bounds}"),
                named_fields(&u.fields),
                " {}",
            )
        }
        syn::Item::Enum(e) => {
            let (params, bounds) = generics(&e.generics);
            let mut variants = Vec::new();
            for variant in e.variants.iter().filter(|v| !test_only(&v.attrs)) {
                let fields: Vec<String> = variant.fields.iter().map(field_text).collect();
                let body = match &variant.fields {
                    syn::Fields::Named(_) => format!(" {{ {} }}", fields.join(", ")),
                    syn::Fields::Unnamed(_) => format!("({})", fields.join(", ")),
                    syn::Fields::Unit => String::new(),
                };
                let discriminant = variant
                    .discriminant
                    .as_ref()
                    .map(|(_, e)| format!(" = {}", text(e)))
                    .unwrap_or_default();
                variants.push(format!(
                    "    {}{}{body}{discriminant},",
                    prefix(&variant.attrs, &[]),
                    variant.ident
                ));
            }
            block(
                format!("{pre}pub enum {path}{params}{bounds}"),
                variants,
                " {}",
            )
        }
        syn::Item::Trait(t) => {
            let (params, bounds) = generics(&t.generics);
            let supertraits = if t.supertraits.is_empty() {
                String::new()
            } else {
                format!(": {}", text(&t.supertraits))
            };
            let unsafety = if t.unsafety.is_some() { "unsafe " } else { "" };
            let auto = if t.modifiers.auto_token.is_some() {
                "auto "
            } else {
                ""
            };
            let mut members = Vec::new();
            for member in &t.items {
                let line = match member {
                    syn::TraitItem::Fn(f) if !test_only(&f.attrs) => {
                        let provided = if f.default.is_some() { " { ... }" } else { ";" };
                        format!("{}{}{provided}", prefix(&f.attrs, &[]), signature(&f.sig))
                    }
                    syn::TraitItem::Type(ty) if !test_only(&ty.attrs) => {
                        let bounds = if ty.bounds.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", text(&ty.bounds))
                        };
                        let default = ty
                            .default
                            .as_ref()
                            .map(|(_, d)| format!(" = {}", text(d)))
                            .unwrap_or_default();
                        format!(
                            "{}type {}{}{bounds}{default};",
                            prefix(&ty.attrs, &[]),
                            ty.ident,
                            text(&ty.generics)
                        )
                    }
                    syn::TraitItem::Const(c) if !test_only(&c.attrs) => {
                        let provided = if c.default.is_some() { " = ..." } else { "" };
                        format!(
                            "{}const {}: {}{provided};",
                            prefix(&c.attrs, &[]),
                            c.ident,
                            text(&c.ty)
                        )
                    }
                    _ => continue,
                };
                members.push(format!("    {line}"));
            }
            members.sort();
            block(
                format!("{pre}pub {unsafety}{auto}trait {path}{params}{supertraits}{bounds}"),
                members,
                " {}",
            )
        }
        syn::Item::Fn(f) => {
            let sig = signature(&f.sig);
            let name = format!("fn {}", f.sig.ident);
            let sig = sig.replacen(&name, &format!("fn {path}"), 1);
            vec![format!("{pre}pub {sig}")]
        }
        syn::Item::Const(c) => vec![format!("{pre}pub const {path}: {}", text(&c.ty))],
        syn::Item::Static(s) => {
            let mutability = if matches!(s.mutability, syn::StaticMutability::Mut(_)) {
                "mut "
            } else {
                ""
            };
            vec![format!(
                "{pre}pub static {mutability}{path}: {}",
                text(&s.ty)
            )]
        }
        syn::Item::Type(t) => {
            let (params, bounds) = generics(&t.generics);
            vec![format!(
                "{pre}pub type {path}{params}{bounds} = {}",
                text(&t.ty)
            )]
        }
        syn::Item::TraitAlias(t) => {
            let (params, bounds) = generics(&t.generics);
            vec![format!(
                "{pre}pub trait {path}{params}{bounds} = {}",
                text(&t.bounds)
            )]
        }
        _ => unreachable!("{path} is none of the items `defined` names"),
    }
}

/// The public API of the crate whose root file is `root`, named `name`.
fn snapshot(root: &Path, name: &str, siblings: &BTreeMap<String, String>) -> String {
    snapshot_of(&Tree::read(root), name, siblings)
}

// ---------------------------------------------------------------------
// Differences.

/// The lines removed from `old` (`-`) and added in `new` (`+`), with two
/// lines of context around each change; empty when they are the same.
fn diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    // ' ', '-' or '+', with the line and its number in `old` or `new`.
    let mut ops: Vec<(char, &str)> = a[..head].iter().map(|l| (' ', *l)).collect();
    if ma.len().saturating_mul(mb.len()) <= 4_000_000 {
        // The longest common subsequence of the middles, from their ends.
        let mut lcs = vec![vec![0u32; mb.len() + 1]; ma.len() + 1];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i][j] = if ma[i] == mb[j] {
                    lcs[i + 1][j + 1] + 1
                } else {
                    lcs[i + 1][j].max(lcs[i][j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                ops.push((' ', ma[i]));
                i += 1;
                j += 1;
            } else if i < ma.len() && (j == mb.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
                ops.push(('-', ma[i]));
                i += 1;
            } else {
                ops.push(('+', mb[j]));
                j += 1;
            }
        }
    } else {
        ops.extend(ma.iter().map(|l| ('-', *l)));
        ops.extend(mb.iter().map(|l| ('+', *l)));
    }
    ops.extend(a[a.len() - tail..].iter().map(|l| (' ', *l)));

    const CONTEXT: usize = 2;
    let changed: Vec<usize> = (0..ops.len()).filter(|&n| ops[n].0 != ' ').collect();
    let mut out = String::new();
    let mut shown_to = 0;
    let (mut old_line, mut new_line) = (1, 1);
    let mut numbers = Vec::with_capacity(ops.len());
    for (kind, _) in &ops {
        numbers.push((old_line, new_line));
        match kind {
            '-' => old_line += 1,
            '+' => new_line += 1,
            _ => {
                old_line += 1;
                new_line += 1;
            }
        }
    }
    for &n in &changed {
        let from = n.saturating_sub(CONTEXT).max(shown_to);
        if from > shown_to || shown_to == 0 {
            let (o, w) = numbers[from];
            let _ = writeln!(out, "@@ line {o} (now {w}) @@");
        }
        let to = (n + CONTEXT + 1).min(ops.len());
        for (kind, line) in &ops[from.max(shown_to)..to.max(shown_to)] {
            let _ = writeln!(out, "{kind}{line}");
        }
        shown_to = shown_to.max(to);
    }
    out
}

/// Compares `now`, the API of `package`, with its snapshot `file`; writes
/// the file instead when `accept`. The difference, if any and not accepted.
fn check(file: &Path, package: &str, now: &str, accept: bool) -> Option<String> {
    let before = fs::read_to_string(file).ok();
    if before.as_deref() == Some(now) {
        return None;
    }
    if accept {
        fs::create_dir_all(file.parent().expect("a folder")).expect("make api/");
        fs::write(file, now).expect("write the snapshot");
        println!(
            "{ACCEPT}: wrote the public API of {package} to {}",
            file.display()
        );
        return None;
    }
    let shown = file.strip_prefix(workspace()).unwrap_or(file).display();
    Some(match before {
        Some(before) => format!(
            "the public API of {package} is not the one in {shown}:\n{}",
            diff(&before, now)
        ),
        None => format!("the public API of {package} is not written down: {shown} is missing\n"),
    })
}

/// Whether the snapshots are to be written rather than compared.
fn accepting() -> bool {
    std::env::var(ACCEPT).is_ok_and(|v| !v.is_empty() && v != "0")
}

#[test]
fn the_public_api_is_the_one_in_the_snapshot() {
    let workspace = workspace();
    let libraries = libraries(&workspace);
    let packages: Vec<&str> = libraries.iter().map(|l| l.package.as_str()).collect();
    for package in ["leasehold", "leasehold-actors"] {
        assert!(
            packages.contains(&package),
            "{package} is not among {packages:?}"
        );
    }
    let siblings: BTreeMap<String, String> = libraries
        .iter()
        .map(|l| (l.name.clone(), l.package.clone()))
        .collect();
    let accept = accepting();
    let mut differences = Vec::new();
    for library in &libraries {
        let now = snapshot(&library.root, &library.name, &siblings);
        let lines = now.lines().count();
        assert!(
            lines >= 100,
            "too little was read of {}: {lines} lines",
            library.package
        );
        let file = workspace
            .join("api")
            .join(format!("{}.txt", library.package));
        differences.extend(check(&file, &library.package, &now, accept));
    }
    // A snapshot of a crate that is gone.
    for entry in fs::read_dir(workspace.join("api"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = entry.path();
        let name = path
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.extension().is_some_and(|e| e == "txt") && !packages.contains(&name) {
            if accept {
                fs::remove_file(&path).expect("remove the snapshot");
                println!("{ACCEPT}: removed {}, of no library crate", path.display());
            } else {
                differences.push(format!("api/{name}.txt is the API of no library crate\n"));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{}\nIf the change is meant, accept it: run\n    {ACCEPT}=1 cargo test -p leasehold-tests --test public_api\n\
         and commit the files in api/ with the change.",
        differences.join("\n")
    );
}

/// A small crate written into a temporary folder: `(path, text)` for
/// each file; its API's snapshot, its crate named `demo`.
fn crate_in(files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (path, text) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("a folder")).expect("make the folder");
        fs::write(&path, text).expect("write the file");
    }
    let siblings = BTreeMap::from([("other".to_owned(), "other-package".to_owned())]);
    snapshot(&dir.path().join("src/lib.rs"), "demo", &siblings)
}

/// A crate with a bit of everything: a struct with a private field, a
/// non-exhaustive enum, a trait, impl blocks, re-exports of its own items
/// and of another crate's, items under `cfg`s, test-only and private ones.
fn small_crate(shapes: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "src/lib.rs",
            "//! The crate.\n\
             mod inner;\n\
             pub mod shapes;\n\
             pub use inner::{Meter, Unit as Measure};\n\
             pub use other::*;\n\
             pub use other::thing::Thing;\n\
             #[cfg(feature = \"extra\")]\n\
             pub use inner::extra;\n\
             /// Makes them.\n\
             pub fn make<T: Clone>(value: T, mut count: usize) -> Vec<T>\n\
             where\n    T: Send,\n{ vec![value; count] }\n\
             pub(crate) fn internal() {}\n\
             #[cfg(test)]\n\
             pub fn only_in_tests() {}\n\
             pub mod prelude { pub use crate::inner::Meter; pub use crate::shapes::*; }\n"
                .to_owned(),
        ),
        (
            "src/inner.rs",
            "use std::fmt;\n\
             /// A length.\n\
             #[derive(Clone, Debug, serde::Serialize)]\n\
             pub struct Meter {\n    /// The value.\n    pub value: f64,\n    scale: u8,\n}\n\
             pub struct Unit(pub u8, String);\n\
             pub struct Hidden;\n\
             impl Meter {\n    /// Makes one.\n    pub fn new(value: f64) -> Self { Meter { value, scale: 0 } }\n\
             \x20   fn private(&self) {}\n    pub(crate) fn crate_only(&self) {}\n}\n\
             impl Default for Meter { fn default() -> Self { Meter::new(0.0) } }\n\
             impl fmt::Display for Meter { fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { Ok(()) } }\n\
             impl crate::shapes::Shape for Meter { type Unit = Unit; fn area(&self) -> f64 { 0.0 } }\n\
             trait Private {}\n\
             impl Private for Meter {}\n\
             #[cfg(feature = \"extra\")]\n\
             pub fn extra() {}\n\
             #[cfg(test)]\n\
             mod tests { impl super::Meter { pub fn in_tests(&self) {} } }\n"
                .to_owned(),
        ),
        ("src/shapes.rs", shapes.to_owned()),
    ]
}

const SHAPES: &str = "/// Kinds.\n\
    #[derive(Debug, Clone, Copy)]\n\
    #[non_exhaustive]\n\
    pub enum Kind {\n    Round,\n    Sides(u32),\n    Named { name: &'static str },\n}\n\
    /// A shape.\n\
    pub trait Shape: Send + Sync {\n    type Unit;\n    fn area(&self) -> f64;\n    /// Its name.\n    fn name(&self) -> String { String::new() }\n}\n\
    impl<T: Shape + ?Sized> Shape for Box<T> { type Unit = T::Unit; fn area(&self) -> f64 { 0.0 } }\n\
    pub const MAX: u32 = 4;\n";

#[test]
fn the_generator_lists_a_small_crates_public_items() {
    let files = small_crate(SHAPES);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let expected = "\
// The public API of `demo`, written by tests/tests/public_api.rs.
// A change is accepted with LEASEHOLD_ACCEPT_API=1 cargo test -p leasehold-tests --test public_api

pub use demo::* = other::* (the root of other-package, listed in api/other-package.txt)
pub struct demo::Measure(pub u8, _)
#[derive(Clone, Debug, Serialize)] pub struct demo::Meter {
    pub value: f64,
    ..
}
impl demo::Meter {
    pub fn new(value: f64) -> Self;
}
impl Default for demo::Meter
impl Display for demo::Meter
impl demo::shapes::Shape for demo::Meter
pub use demo::Thing = other::thing::Thing
#[cfg(feature = \"extra\")] pub fn demo::extra()
pub fn demo::make<T: Clone>(value: T, count: usize) -> Vec<T> where T: Send
pub mod demo::prelude
pub mod demo::shapes

pub use demo::prelude::Kind = demo::shapes::Kind
pub use demo::prelude::MAX = demo::shapes::MAX
pub use demo::prelude::Meter = demo::Meter
pub use demo::prelude::Shape = demo::shapes::Shape

#[derive(Clone, Copy, Debug)] #[non_exhaustive] pub enum demo::shapes::Kind {
    Round,
    Sides(u32),
    Named { name: &'static str },
}
pub const demo::shapes::MAX: u32
pub trait demo::shapes::Shape: Send + Sync {
    fn area(&self) -> f64;
    fn name(&self) -> String { ... }
    type Unit;
}
impl<T: Shape + ?Sized> demo::shapes::Shape for Box<T>
";
    let got = crate_in(&files);
    assert!(
        got == expected,
        "got:\n{got}\ndifference from the expected:\n{}",
        diff(expected, &got)
    );
}

#[test]
fn a_changed_item_shows_as_lines_removed_and_added() {
    let files = small_crate(SHAPES);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let before = crate_in(&files);
    // A new variant, and the enum no longer non-exhaustive.
    let changed = SHAPES
        .replace("#[non_exhaustive]\n", "")
        .replace("    Round,\n", "    Round,\n    Square(f64),\n");
    let files = small_crate(&changed);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let after = crate_in(&files);
    let difference = diff(&before, &after);
    assert!(
        difference.contains(
            "-#[derive(Clone, Copy, Debug)] #[non_exhaustive] pub enum demo::shapes::Kind {\n\
             +#[derive(Clone, Copy, Debug)] pub enum demo::shapes::Kind {\n\
             \x20    Round,\n\
             +    Square(f64),\n"
        ),
        "{difference}"
    );
    assert_eq!(
        difference
            .lines()
            .filter(|l| l.starts_with(['-', '+']))
            .count(),
        3,
        "{difference}"
    );
    assert_eq!(diff(&before, &before), "");
}

#[test]
#[should_panic(expected = "the public API of demo is not the one in")]
fn the_check_fails_on_a_changed_api_and_writes_it_when_accepted() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("api/demo.txt");
    let files = small_crate(SHAPES);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let now = crate_in(&files);
    // Accepted: the file is written, and then matches.
    assert_eq!(check(&file, "demo", &now, true), None);
    assert_eq!(fs::read_to_string(&file).expect("written"), now);
    assert_eq!(check(&file, "demo", &now, false), None);
    // A field made private.
    let changed = now.replace("    pub value: f64,\n", "");
    let difference = check(&file, "demo", &changed, false).expect("a difference");
    assert!(
        difference.contains("\n-    pub value: f64,\n"),
        "{difference}"
    );
    panic!("{difference}");
}
