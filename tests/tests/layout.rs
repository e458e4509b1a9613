//! No file of the workspace imports, directly or through others, a file
//! that imports it back: the files of each crate form a graph without
//! cycles, so each can be read, changed and tested standing on the files
//! below it alone.
//!
//! The graph is read from the sources with `syn`, file by file, for every
//! library and binary target that `cargo metadata` lists (tests, benches
//! and examples are not part of it). An arrow `a.rs -> b.rs` means that
//! `a.rs` names an item that `b.rs` defines. How names are followed:
//!
//! - The module tree is the compiler's: `mod x;` is `x.rs` or `x/mod.rs`
//!   beside a `lib.rs`, `main.rs` or `mod.rs` (or a file a `#[path]` names),
//!   and `a/x.rs` or `a/x/mod.rs` beside any other file `a.rs`; `#[path]`
//!   is read as the compiler reads it; an inline `mod x { … }` is a module
//!   of its file. Declaring a child (`mod x;`) is structure, not an import,
//!   and so is a child's naming its ancestors' items (`super::Item`): a
//!   parent is the face of its children, and what it re-exports of them
//!   does not make them import it back.
//! - A path names an item when it starts at `crate`, `self`, `super` or a
//!   name in scope (the module's own items, children and `use` bindings, and
//!   its glob imports) and reaches, segment by segment, a struct, enum,
//!   union, function, constant, static, trait, type alias or macro; what
//!   follows the item (`Type::new`, `Enum::Variant`) belongs to it. That
//!   holds for `use` items (`pub use` too: a re-export is an import by the
//!   file that re-exports), for every path in types, expressions, patterns
//!   and attributes' paths, for `a::b` paths in macro arguments, and for
//!   serde's `with = "…"`-like attribute strings.
//! - A name reached through a `use` (a re-export such as `pub use
//!   child::Item`, or a parent's own import seen by `super::Item`) is
//!   followed to the file that defines it: naming `crate::Item` that
//!   `lib.rs` re-exports from `child.rs` is an arrow to `child.rs`, not to
//!   `lib.rs`. A glob import (`use m::*`) is an arrow to `m`'s file, named
//!   `*`, besides the names it is later followed for.
//! - Names of other crates, `std` and the prelude lead nowhere: cargo
//!   already forbids cycles between crates.
//! - Code under `#[cfg(test)]` is the crate's unit tests, not its layout,
//!   and is skipped; every other `cfg` is read as if on, so each feature's
//!   files count.
//!
//! Each cycle found is a strongly connected set of files; the failure names
//! it as a chain of files, each arrow with the names that make it, then
//! lists every arrow between its files.

#[path = "support/source.rs"]
mod source;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use source::{item_attrs, path_attr, test_only, workspace};
use syn::buffer::{Cursor, TokenBuffer};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};

/// The root file of every library and binary crate of the workspace, as
/// `cargo metadata` lists its targets (offline: no dependency is resolved).
fn crate_roots(workspace: &Path) -> Vec<PathBuf> {
    let metadata = source::metadata(workspace);
    let mut roots = Vec::new();
    for package in metadata["packages"].as_array().expect("a package list") {
        for target in package["targets"].as_array().expect("a target list") {
            let kinds = target["kind"].as_array().expect("a target's kinds");
            // Tests, benches, examples and build scripts depend on the
            // crates; they are not part of their layout.
            let not_code = ["test", "bench", "example", "custom-build"];
            if kinds
                .iter()
                .any(|k| not_code.contains(&k.as_str().unwrap_or("")))
            {
                continue;
            }
            let source = target["src_path"].as_str().expect("a target's root file");
            roots.push(PathBuf::from(source));
        }
    }
    roots.sort();
    roots
}

/// One module: a file, or an inline `mod name { … }` within one.
struct Module {
    /// The file its items are written in.
    file: usize,
    /// The module that declares it; none for a crate's root.
    parent: Option<usize>,
    /// Its crate's root module, where `crate::` starts.
    root: usize,
    /// Its items, `#[cfg(test)]` ones left out (its modules too: each is
    /// a module of its own).
    items: Vec<syn::Item>,
    /// Its child modules, by name.
    children: BTreeMap<String, usize>,
    /// The names of the items it defines.
    defines: BTreeSet<String>,
    /// Each name a `use` binds in it, with the path bound.
    uses: BTreeMap<String, Vec<String>>,
    /// The paths of its glob imports.
    globs: Vec<Vec<String>>,
}

/// What a path leads to.
#[derive(Clone, Debug, PartialEq)]
enum Target {
    /// A module of the crate.
    Module(usize),
    /// An item, by the file that defines it and its name there.
    Item(usize, String),
    /// Another crate, `std`, the prelude, or nothing known.
    Elsewhere,
}

/// The modules of one or more crates and the files they are written in.
#[derive(Default)]
struct Tree {
    /// Each file read, relative to the folder the tree was read from.
    files: Vec<PathBuf>,
    modules: Vec<Module>,
}

/// The name an item defines in its module's namespace, if any.
fn defined_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    let name = ident.to_string();
    (name != "_").then_some(name)
}

/// One leaf of a `use` tree: the name it binds (none for `_` or a glob)
/// and the path it names (the glob's module for a glob).
struct UseLeaf {
    binding: Option<String>,
    path: Vec<String>,
    glob: bool,
}

/// The leaves of a `use` tree under `prefix`.
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut path = prefix.clone();
            // `use a::{self}` binds `a`.
            if name != "self" {
                path.push(name.clone());
            }
            let binding = if name == "self" {
                prefix.last().cloned()
            } else {
                Some(name)
            };
            out.push(UseLeaf {
                binding,
                path,
                glob: false,
            });
        }
        syn::UseTree::Rename(r) => {
            let name = r.ident.to_string();
            let mut path = prefix.clone();
            if name != "self" {
                path.push(name);
            }
            let rename = r.rename.to_string();
            out.push(UseLeaf {
                binding: (rename != "_").then_some(rename),
                path,
                glob: false,
            });
        }
        syn::UseTree::Glob(_) => out.push(UseLeaf {
            binding: None,
            path: prefix.clone(),
            glob: true,
        }),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, out);
            }
        }
    }
}

/// The `use` items written inside an item's bodies (a function's block, an
/// impl's methods), outside any nested module.
#[derive(Default)]
struct InnerUses<'a> {
    found: Vec<&'a syn::ItemUse>,
}

impl<'a> Visit<'a> for InnerUses<'a> {
    fn visit_item_use(&mut self, item: &'a syn::ItemUse) {
        if !test_only(&item.attrs) {
            self.found.push(item);
        }
    }

    fn visit_item_mod(&mut self, _: &'a syn::ItemMod) {}

    fn visit_item(&mut self, item: &'a syn::Item) {
        if !test_only(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }
}

/// Where a module stands: its file, its place in the tree and the folders
/// its declarations start from.
struct Site {
    /// The file its items are written in.
    file: usize,
    /// The folder that file sits in, on disk.
    file_dir: PathBuf,
    /// The module that declares it; none for a crate's root.
    parent: Option<usize>,
    /// Its crate's root module.
    root: usize,
    /// Where the files of its `mod child;` declarations are looked for.
    dir: PathBuf,
    /// Whether its items are the whole of their file, not an inline
    /// module's: a `#[path]` there starts from the file's folder.
    file_level: bool,
}

impl Tree {
    /// Reads the crate whose root file is `root`, and every module file it
    /// declares, naming files relative to `base`.
    fn read_crate(&mut self, root: &Path, base: &Path) {
        let id = self.modules.len();
        let dir = root.parent().expect("a root file sits in a folder");
        self.read_file_module(root, base, None, id, dir.to_path_buf());
    }

    /// Reads the module in `file`, declared by `parent`, whose children's
    /// files are looked for in `dir`.
    fn read_file_module(
        &mut self,
        file: &Path,
        base: &Path,
        parent: Option<usize>,
        root: usize,
        dir: PathBuf,
    ) -> usize {
        let text = fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()));
        let name = file.strip_prefix(base).unwrap_or(file).to_path_buf();
        let file_id = self.files.len();
        self.files.push(name);
        let site = Site {
            file: file_id,
            file_dir: file.parent().expect("a file sits in a folder").into(),
            parent,
            root,
            dir,
            file_level: true,
        };
        self.add_module(site, parsed.items, base)
    }

    /// Adds the module at `site` whose items are `items`, then reads its
    /// children.
    fn add_module(&mut self, site: Site, items: Vec<syn::Item>, base: &Path) -> usize {
        let items: Vec<syn::Item> = items
            .into_iter()
            .filter(|item| !test_only(item_attrs(item)))
            .collect();
        let id = self.modules.len();
        let mut module = Module {
            file: site.file,
            parent: site.parent,
            root: site.root,
            items: Vec::new(),
            children: BTreeMap::new(),
            defines: BTreeSet::new(),
            uses: BTreeMap::new(),
            globs: Vec::new(),
        };
        let mut inner = InnerUses::default();
        for item in &items {
            if let Some(name) = defined_name(item) {
                module.defines.insert(name);
            }
            match item {
                syn::Item::Use(u) => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    for leaf in leaves {
                        if leaf.glob {
                            module.globs.push(leaf.path);
                        } else if let Some(binding) = leaf.binding {
                            module.uses.insert(binding, leaf.path);
                        }
                    }
                }
                syn::Item::Mod(_) => {}
                other => inner.visit_item(other),
            }
        }
        // A `use` inside a function binds its name in that block alone; it
        // is read as the module's, after the module's own, which is enough
        // to follow the names it brings.
        for u in inner.found {
            let mut leaves = Vec::new();
            use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
            for leaf in leaves {
                if let (Some(binding), false) = (leaf.binding, leaf.glob) {
                    module.uses.entry(binding).or_insert(leaf.path);
                }
            }
        }
        self.modules.push(module);

        let mut kept = Vec::new();
        for item in items {
            let syn::Item::Mod(m) = item else {
                kept.push(item);
                continue;
            };
            let name = m.ident.to_string();
            let child = match m.content {
                Some((_, content)) => {
                    let inline = Site {
                        file: site.file,
                        file_dir: site.file_dir.clone(),
                        parent: Some(id),
                        root: site.root,
                        dir: site.dir.join(&name),
                        file_level: false,
                    };
                    self.add_module(inline, content, base)
                }
                None => {
                    let (path, dir) = match path_attr(&m.attrs) {
                        // A file named by `#[path]` owns its folder, as a
                        // `mod.rs` does.
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
                    self.read_file_module(&path, base, Some(id), site.root, dir)
                }
            };
            self.modules[id].children.insert(name, child);
        }
        self.modules[id].items = kept;
        id
    }

    /// What `path`, written in `module`, leads to.
    fn resolve(&self, module: usize, path: &[String]) -> Target {
        self.resolve_from(module, path, &mut Vec::new())
    }

    fn resolve_from(
        &self,
        module: usize,
        path: &[String],
        seen: &mut Vec<(usize, String)>,
    ) -> Target {
        let Some((first, rest)) = path.split_first() else {
            return Target::Module(module);
        };
        let mut target = match first.as_str() {
            "crate" | "$crate" => Target::Module(self.modules[module].root),
            "self" => Target::Module(module),
            "super" => self.modules[module]
                .parent
                .map_or(Target::Elsewhere, Target::Module),
            name => self.lookup(module, name, seen),
        };
        for segment in rest {
            target = match target {
                Target::Module(m) => match segment.as_str() {
                    "self" => Target::Module(m),
                    "super" => self.modules[m]
                        .parent
                        .map_or(Target::Elsewhere, Target::Module),
                    name => self.lookup(m, name, seen),
                },
                // `Type::new`, `Enum::Variant`: the rest belongs to the item.
                found => return found,
            };
        }
        target
    }

    /// What `name` means in `module`: a child, an item it defines, or what
    /// its `use` bindings and glob imports bring.
    fn lookup(&self, module: usize, name: &str, seen: &mut Vec<(usize, String)>) -> Target {
        let m = &self.modules[module];
        if let Some(&child) = m.children.get(name) {
            return Target::Module(child);
        }
        if m.defines.contains(name) {
            return Target::Item(m.file, name.to_owned());
        }
        // `use a::b` binding `b` to itself, or two re-exports naming each
        // other, would loop; what cannot be followed leads elsewhere.
        let key = (module, name.to_owned());
        if seen.contains(&key) {
            return Target::Elsewhere;
        }
        seen.push(key);
        let mut found = match m.uses.get(name) {
            Some(path) => self.resolve_from(module, path, seen),
            None => Target::Elsewhere,
        };
        if found == Target::Elsewhere {
            for glob in &m.globs {
                if let Target::Module(from) = self.resolve_from(module, glob, seen) {
                    found = self.lookup(from, name, seen);
                    if found != Target::Elsewhere {
                        break;
                    }
                }
            }
        }
        seen.pop();
        found
    }
}

/// The arrows between files: for each `(from, to)` pair of files, the
/// names `from` takes from `to`.
type Arrows = BTreeMap<(usize, usize), BTreeSet<String>>;

/// Collects the arrows that the items of one module draw.
struct ArrowReader<'t> {
    tree: &'t Tree,
    module: usize,
    arrows: &'t mut Arrows,
}

/// The serde attribute keys whose string value is a path to an item.
const SERDE_PATH_KEYS: [&str; 8] = [
    "with",
    "serialize_with",
    "deserialize_with",
    "default",
    "skip_serializing_if",
    "from",
    "try_from",
    "into",
];

impl ArrowReader<'_> {
    fn arrow_to(&mut self, target: Target) {
        let from = self.tree.modules[self.module].file;
        if let Target::Item(to, name) = target
            && to != from
            && !self.is_ancestor_file(to)
        {
            self.arrows.entry((from, to)).or_default().insert(name);
        }
    }

    /// Whether `file` holds one of this module's ancestors: a module sees
    /// its ancestors' items as Rust's module tree gives them to it, and a
    /// parent is the face of its children (it declares them and re-exports
    /// what they make), so a child naming its parent's items is structure,
    /// as `mod child;` is, not an arrow back up.
    fn is_ancestor_file(&self, file: usize) -> bool {
        let mut module = self.tree.modules[self.module].parent;
        while let Some(at) = module {
            if self.tree.modules[at].file == file {
                return true;
            }
            module = self.tree.modules[at].parent;
        }
        false
    }

    fn path(&mut self, segments: &[String]) {
        let target = self.tree.resolve(self.module, segments);
        self.arrow_to(target);
    }

    /// The `a::b::c` paths among the tokens of a macro's arguments.
    fn macro_tokens(&mut self, cursor: Cursor) {
        let mut cursor = cursor;
        // After `::` not preceded by a name, a path is absolute (another
        // crate's) or continues one already read.
        let mut after_colons = false;
        while !cursor.eof() {
            if let Some((inside, _, _, next)) = cursor.any_group() {
                self.macro_tokens(inside);
                cursor = next;
                after_colons = false;
                continue;
            }
            if let Some((ident, next)) = cursor.ident() {
                let mut segments = vec![ident.to_string()];
                let mut end = next;
                while let Some((first, c)) = end.punct()
                    && first.as_char() == ':'
                    && let Some((second, c)) = c.punct()
                    && second.as_char() == ':'
                    && let Some((ident, c)) = c.ident()
                {
                    segments.push(ident.to_string());
                    end = c;
                }
                if segments.len() > 1 && !after_colons {
                    self.path(&segments);
                }
                cursor = end;
                after_colons = false;
                continue;
            }
            if let Some((punct, next)) = cursor.punct() {
                if punct.as_char() == '$'
                    && let Some((ident, after)) = next.ident()
                    && ident == "crate"
                {
                    // `$crate::a::b` in a macro's definition: the crate's
                    // own path.
                    let mut segments = vec!["crate".to_owned()];
                    let mut end = after;
                    while let Some((first, c)) = end.punct()
                        && first.as_char() == ':'
                        && let Some((second, c)) = c.punct()
                        && second.as_char() == ':'
                        && let Some((ident, c)) = c.ident()
                    {
                        segments.push(ident.to_string());
                        end = c;
                    }
                    self.path(&segments);
                    cursor = end;
                    after_colons = false;
                    continue;
                }
                after_colons =
                    punct.as_char() == ':' && next.punct().is_some_and(|(p, _)| p.as_char() == ':');
                cursor = next;
                continue;
            }
            match cursor.token_tree() {
                Some((_, next)) => cursor = next,
                None => break,
            }
        }
    }
}

impl<'ast> Visit<'ast> for ArrowReader<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !test_only(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !test_only(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    // A module declared here is read as a module of its own.
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&item.tree, &mut Vec::new(), &mut leaves);
        for leaf in leaves {
            let target = self.tree.resolve(self.module, &leaf.path);
            match target {
                Target::Module(m) if leaf.glob => {
                    let file = self.tree.modules[m].file;
                    self.arrow_to(Target::Item(file, "*".to_owned()));
                }
                other => self.arrow_to(other),
            }
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.path(&segments);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        let buffer = TokenBuffer::new2(mac.tokens.clone());
        self.macro_tokens(buffer.begin());
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        visit::visit_attribute(self, attr);
        if !attr.path().is_ident("serde") {
            return;
        }
        let Ok(metas) =
            attr.parse_args_with(Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
        else {
            return;
        };
        for meta in metas {
            if let syn::Meta::NameValue(nv) = meta
                && SERDE_PATH_KEYS.iter().any(|key| nv.path.is_ident(key))
                && let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) = &nv.value
                && let Ok(path) = s.parse::<syn::Path>()
            {
                let segments: Vec<String> =
                    path.segments.iter().map(|s| s.ident.to_string()).collect();
                if nv.path.is_ident("with") {
                    // `with` names a module whose two functions serde calls.
                    for function in ["serialize", "deserialize"] {
                        let mut path = segments.clone();
                        path.push(function.to_owned());
                        self.path(&path);
                    }
                } else {
                    self.path(&segments);
                }
            }
        }
    }
}

/// The import graph of the crates whose root files are `roots`, its files
/// named relative to `base`.
struct Graph {
    files: Vec<PathBuf>,
    arrows: Arrows,
}

impl Graph {
    fn read(roots: &[PathBuf], base: &Path) -> Graph {
        let mut tree = Tree::default();
        for root in roots {
            tree.read_crate(root, base);
        }
        let mut arrows = Arrows::new();
        for module in 0..tree.modules.len() {
            let mut reader = ArrowReader {
                tree: &tree,
                module,
                arrows: &mut arrows,
            };
            for item in &tree.modules[module].items {
                reader.visit_item(item);
            }
        }
        Graph {
            files: tree.files,
            arrows,
        }
    }

    /// The files each file imports.
    fn imports(&self) -> Vec<BTreeSet<usize>> {
        let mut imports = vec![BTreeSet::new(); self.files.len()];
        for &(from, to) in self.arrows.keys() {
            imports[from].insert(to);
        }
        imports
    }

    /// The sets of files that import each other, each of two files or more
    /// (strongly connected components, by Tarjan's algorithm), each sorted,
    /// in the order of their first file.
    fn cycles(&self) -> Vec<Vec<usize>> {
        struct Walk<'g> {
            imports: &'g [BTreeSet<usize>],
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            on_stack: Vec<bool>,
            stack: Vec<usize>,
            next: usize,
            found: Vec<Vec<usize>>,
        }
        impl Walk<'_> {
            fn visit(&mut self, v: usize) {
                self.index[v] = Some(self.next);
                self.low[v] = self.next;
                self.next += 1;
                self.stack.push(v);
                self.on_stack[v] = true;
                for &w in self.imports[v].iter() {
                    match self.index[w] {
                        None => {
                            self.visit(w);
                            self.low[v] = self.low[v].min(self.low[w]);
                        }
                        Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                        Some(_) => {}
                    }
                }
                if Some(self.low[v]) == self.index[v] {
                    let mut set = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack[w] = false;
                        set.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if set.len() > 1 {
                        self.found.push(set);
                    }
                }
            }
        }
        let imports = self.imports();
        let n = self.files.len();
        let mut walk = Walk {
            imports: &imports,
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            found: Vec::new(),
        };
        for v in 0..n {
            if walk.index[v].is_none() {
                walk.visit(v);
            }
        }
        let mut found = walk.found;
        for set in &mut found {
            set.sort_by(|a, b| self.files[*a].cmp(&self.files[*b]));
        }
        found.sort_by(|a, b| self.files[a[0]].cmp(&self.files[b[0]]));
        found
    }

    /// A shortest chain of imports from `set`'s first file back to it,
    /// within `set`.
    fn chain(&self, set: &[usize]) -> Vec<usize> {
        let imports = self.imports();
        let start = set[0];
        let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for &w in &imports[v] {
                if !set.contains(&w) {
                    continue;
                }
                if w == start {
                    let mut chain = vec![start, v];
                    let mut at = v;
                    while at != start {
                        at = came_from[&at];
                        chain.push(at);
                    }
                    chain.reverse();
                    return chain;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = came_from.entry(w) {
                    e.insert(v);
                    queue.push_back(w);
                }
            }
        }
        unreachable!("a strongly connected set holds a cycle through each file")
    }

    /// The names `from` takes from `to`, as a list.
    fn names(&self, from: usize, to: usize) -> String {
        self.arrows[&(from, to)]
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Each cycle in words: a chain of files with the names that tie each
    /// to the next, then every arrow between its files.
    fn describe(&self, cycles: &[Vec<usize>]) -> String {
        let mut text = String::new();
        for (n, set) in cycles.iter().enumerate() {
            let file = |f: usize| self.files[f].display().to_string();
            let _ = writeln!(
                text,
                "cycle {} of {}: {} files import each other",
                n + 1,
                cycles.len(),
                set.len()
            );
            let chain = self.chain(set);
            let _ = write!(text, "  {}", file(chain[0]));
            for pair in chain.windows(2) {
                let _ = write!(
                    text,
                    "\n    -> {} (names {})",
                    file(pair[1]),
                    self.names(pair[0], pair[1])
                );
            }
            let _ = writeln!(text, "\n  every arrow between them:");
            let mut within: Vec<(usize, usize)> = self
                .arrows
                .keys()
                .copied()
                .filter(|(from, to)| set.contains(from) && set.contains(to))
                .collect();
            within.sort_by_key(|&(from, to)| (&self.files[from], &self.files[to]));
            for (from, to) in within {
                let _ = writeln!(
                    text,
                    "    {} -> {}: {}",
                    file(from),
                    file(to),
                    self.names(from, to)
                );
            }
        }
        text
    }

    /// Each cycle as its files' names, for assertions.
    fn cycle_files(&self) -> Vec<Vec<String>> {
        self.cycles()
            .iter()
            .map(|set| {
                set.iter()
                    .map(|&f| self.files[f].display().to_string())
                    .collect()
            })
            .collect()
    }

    /// The names `from` takes from `to`, by file name, if it imports it.
    fn arrow(&self, from: &str, to: &str) -> Option<Vec<String>> {
        let find = |name: &str| {
            self.files
                .iter()
                .position(|f| f == Path::new(name))
                .unwrap_or_else(|| panic!("{name} was not read: {:?}", self.files))
        };
        self.arrows
            .get(&(find(from), find(to)))
            .map(|names| names.iter().cloned().collect())
    }
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let workspace = workspace();
    let roots = crate_roots(&workspace);
    for root in [
        "actors/src/lib.rs",
        "runtime/src/lib.rs",
        "server/src/lib.rs",
        "lab/src/lib.rs",
        "cli/src/lib.rs",
        "cli/src/main.rs",
    ] {
        assert!(
            roots.contains(&workspace.join(root)),
            "{root} is not among the crates' roots: {roots:?}"
        );
    }
    let graph = Graph::read(&roots, &workspace);
    assert!(
        graph.files.len() >= 150 && graph.arrows.len() >= 300,
        "too little was read: {} files, {} arrows",
        graph.files.len(),
        graph.arrows.len()
    );
    assert_no_cycles(&graph);
}

/// Fails naming each cycle of `graph`.
fn assert_no_cycles(graph: &Graph) {
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "{} between files; a file must not import, directly or \
         through others, a file that imports it back:\n{}",
        leasehold::counted(cycles.len(), "import cycle"),
        graph.describe(&cycles)
    );
}

/// A crate written into a temporary folder: `(path, text)` for each file.
fn crate_in(files: &[(&str, &str)]) -> (tempfile::TempDir, Graph) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (path, text) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("a folder")).expect("make the folder");
        fs::write(&path, text).expect("write the file");
    }
    let graph = Graph::read(&[dir.path().join("src/lib.rs")], dir.path());
    (dir, graph)
}

/// Three files that import each other in a ring: `a` names `b`'s `B`,
/// `b` names `c`'s `C`, `c` names `a`'s `A` (and `b`'s `B`).
const RING: [(&str, &str); 4] = [
    ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
    ("src/a.rs", "use crate::b::B;\npub struct A(B);\n"),
    (
        "src/b.rs",
        "pub struct B;\npub fn make() -> super::c::C { crate::c::C }\n",
    ),
    (
        "src/c.rs",
        "pub struct C;\nfn f() { let _ = crate::a::A(crate::b::B); }\n",
    ),
];

#[test]
#[should_panic(expected = "1 import cycle between files")]
fn the_check_fails_on_a_crate_with_a_cycle() {
    let (_dir, graph) = crate_in(&RING);
    assert_no_cycles(&graph);
}

#[test]
fn a_cycle_between_files_is_found_and_named() {
    let (_dir, graph) = crate_in(&RING);
    assert_eq!(
        graph.cycle_files(),
        vec![vec!["src/a.rs", "src/b.rs", "src/c.rs"]]
    );
    let words = graph.describe(&graph.cycles());
    assert!(
        words.contains("cycle 1 of 1: 3 files import each other\n  src/a.rs\n    -> src/b.rs (names B)\n    -> src/c.rs (names C)\n    -> src/a.rs (names A)"),
        "{words}"
    );
    assert!(words.contains("    src/c.rs -> src/b.rs: B\n"), "{words}");
}

#[test]
fn a_parent_declaring_its_children_is_no_cycle_nor_a_child_using_its_items() {
    // The parent declares its children and re-exports one of them; the
    // other child imports the re-export, which leads to the file that
    // defines it, not to the parent.
    let (_dir, graph) = crate_in(&[
        ("src/lib.rs", "mod a;\nmod b;\npub use a::A;\n"),
        ("src/a.rs", "mod inner;\npub struct A;\n"),
        ("src/a/inner.rs", "pub struct Inner;\n"),
        ("src/b.rs", "use crate::A;\nfn f(_: A) {}\n"),
    ]);
    assert_eq!(graph.cycle_files(), Vec::<Vec<String>>::new());
    assert_eq!(graph.arrow("src/b.rs", "src/a.rs"), Some(vec!["A".into()]));
    assert_eq!(
        graph.arrow("src/lib.rs", "src/a.rs"),
        Some(vec!["A".into()])
    );
    assert_eq!(graph.arrow("src/b.rs", "src/lib.rs"), None);
    assert_eq!(graph.arrow("src/a.rs", "src/a/inner.rs"), None);

    // A parent that uses its child's item, and a child that uses the
    // parent's: the parent is the child's face, and the child sees the
    // parent's items as its own scope; no cycle.
    let (_dir, graph) = crate_in(&[
        ("src/lib.rs", "mod run;\n"),
        (
            "src/run/mod.rs",
            "mod tools;\npub struct Plan;\nfn go() { tools::connect(); }\n",
        ),
        (
            "src/run/tools.rs",
            "use super::Plan;\npub fn connect() {}\n",
        ),
    ]);
    assert!(graph.cycle_files().is_empty());
    assert_eq!(graph.arrow("src/run/tools.rs", "src/run/mod.rs"), None);
    assert_eq!(
        graph.arrow("src/run/mod.rs", "src/run/tools.rs"),
        Some(vec!["connect".into()])
    );
}

#[test]
fn reexports_paths_attributes_macros_and_serde_strings_are_followed() {
    let (_dir, graph) = crate_in(&[
        (
            "src/lib.rs",
            "mod names;\nmod time;\nmod user;\n#[path = \"odd/place.rs\"]\nmod placed;\n\
             pub use names::Name as Called;\n",
        ),
        ("src/names.rs", "pub struct Name;\n"),
        (
            "src/time.rs",
            "pub mod millis {\n    pub fn serialize() {}\n    pub fn deserialize() {}\n}\n",
        ),
        ("src/odd/place.rs", "mod deep;\n"),
        ("src/odd/deep.rs", "pub fn deep() {}\n"),
        (
            "src/user.rs",
            "#[derive(serde::Serialize)]\nstruct S {\n    #[serde(with = \"crate::time::millis\", default = \"crate::placed::deep::deep\")]\n    x: u64,\n}\n\
             fn f() { let _ = vec![crate::Called]; }\n\
             #[cfg(test)]\nmod tests { use crate::names::Name; }\n",
        ),
    ]);
    assert_eq!(
        graph.arrow("src/user.rs", "src/names.rs"),
        Some(vec!["Name".into()])
    );
    // `with` names a module: serde calls its two functions.
    assert_eq!(
        graph.arrow("src/user.rs", "src/time.rs"),
        Some(vec!["deserialize".into(), "serialize".into()])
    );
    assert_eq!(
        graph.arrow("src/user.rs", "src/odd/deep.rs"),
        Some(vec!["deep".into()])
    );
    assert_eq!(graph.arrow("src/user.rs", "src/lib.rs"), None);
}

/// The top-level modules of `leasehold-actors` (a file `src/x.rs` and the
/// files under `src/x/` are module `x`) form a graph without cycles too:
/// the shared vocabulary below the supervision core, the core below the
/// run, the run below the engine, each standing on what is below it alone.
#[test]
fn no_module_of_the_actors_crate_imports_a_module_that_imports_it_back() {
    let workspace = workspace();
    let graph = Graph::read(&[workspace.join("actors/src/lib.rs")], &workspace);
    let src = workspace.join("actors/src");
    // The supervision core's folder holds modules of their own
    // (`supervision/lease.rs` and `supervision/lease/` are module
    // `supervision/lease`), each held to the rule like the crate's.
    let module_of = |file: &Path| -> Option<String> {
        let relative = file.strip_prefix(&src).ok()?;
        let mut parts = relative.components().map(|c| c.as_os_str().to_str());
        let first = parts.next()??;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        match (name, parts.next().flatten()) {
            ("lib", _) => None,
            ("supervision", Some(child)) if first == "supervision" => Some(format!(
                "supervision/{}",
                child.strip_suffix(".rs").unwrap_or(child)
            )),
            _ => Some(name.to_owned()),
        }
    };
    let modules: Vec<Option<String>> = graph
        .files
        .iter()
        .map(|f| module_of(&workspace.join(f)).or_else(|| module_of(f)))
        .collect();
    let mut arrows: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (&(from, to), names) in &graph.arrows {
        if let (Some(a), Some(b)) = (&modules[from], &modules[to])
            && a != b
        {
            arrows
                .entry((a.clone(), b.clone()))
                .or_default()
                .extend(names.iter().map(|n| {
                    format!(
                        "{} -> {}: {n}",
                        graph.files[from].display(),
                        graph.files[to].display()
                    )
                }));
        }
    }
    let names: BTreeSet<&String> = modules.iter().flatten().collect();
    assert!(names.len() >= 20, "too few modules were read: {names:?}");
    let reaches = |start: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([start.clone()]);
        while let Some(at) = queue.pop_front() {
            for (a, b) in arrows.keys() {
                if *a == at && seen.insert(b.clone()) {
                    queue.push_back(b.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        names.iter().map(|m| (*m, reaches(m))).collect();
    let mut text = String::new();
    for ((a, b), why) in &arrows {
        if reach[b].contains(a) {
            let _ = writeln!(text, "{a} -> {b}, which reaches {a} back:");
            for line in why {
                let _ = writeln!(text, "    {line}");
            }
        }
    }
    assert!(
        text.is_empty(),
        "modules of leasehold-actors that import each other, directly or through others:\n{text}"
    );
}
