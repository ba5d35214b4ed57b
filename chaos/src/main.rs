fn main() {
    println!("agentchaos: harness not built yet");
}
