// A shield's work split and left unspawned: the runner must be used.
#![deny(unused_must_use)]

use loopguard::shield::Shield;

fn main() {
    let shield = Shield::new("flush").unwrap();
    shield.wrap(async { 1 });
}
